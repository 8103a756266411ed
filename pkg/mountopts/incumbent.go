package mountopts

import (
	"fmt"
	"sort"
	"strconv"
)

// Volume attributes of the incumbent GKE GCS FUSE CSI driver, accepted as aliases so that
// PersistentVolumes and inline volumes written for it work unchanged (docs/migration.md).
// Each maps onto an allowlisted gcsfuse option with the same meaning, goes through the same
// checks as the option itself (a bad value names the attribute), and comes out after the
// mountOptions in a fixed order. Where this driver has no equivalent, the attribute is
// accepted only with a value that asks for nothing, and refused otherwise, saying why.

// incumbentAlias turns one attribute value into options ("" for none).
type incumbentAlias func(v string) ([]string, error)

func boolOption(name string) incumbentAlias {
	return func(v string) ([]string, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("value %q is not true or false", v)
		}
		return []string{name + "=" + strconv.FormatBool(b)}, nil
	}
}

func sizeOption(name string) incumbentAlias {
	return func(v string) ([]string, error) {
		mib, err := capacityMiB(v)
		if err != nil {
			return nil, err
		}
		return []string{name + "=" + strconv.FormatInt(mib, 10)}, nil
	}
}

func valueOption(name string) incumbentAlias {
	return func(v string) ([]string, error) { return []string{name + "=" + v}, nil }
}

var incumbentAttrs = map[string]incumbentAlias{
	"fileCacheForRangeRead":     boolOption("file-cache-cache-file-for-range-read"),
	"metadataStatCacheCapacity": sizeOption("stat-cache-max-size-mb"),
	"metadataTypeCacheCapacity": sizeOption("type-cache-max-size-mb"),
	"metadataCacheTTLSeconds":   valueOption("metadata-cache-ttl-secs"),
	"gcsfuseLoggingSeverity":    valueOption("log-severity"),
	// The incumbent lists the bucket after mounting to warm the metadata cache; gcsfuse
	// does the same itself with this option.
	"gcsfuseMetadataPrefetchOnMount": func(v string) ([]string, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("value %q is not true or false", v)
		}
		if !b {
			return nil, nil
		}
		return []string{"experimental-metadata-prefetch-on-mount=async"}, nil
	},
	// The incumbent checks bucket access in NodePublishVolume; this driver makes no such
	// check (gcsfuse's own start fails visibly instead), so there is nothing to skip.
	"skipCSIBucketAccessCheck": func(v string) ([]string, error) {
		if _, err := strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("value %q is not true or false", v)
		}
		return nil, nil
	},
	"disableMetrics": func(v string) ([]string, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("value %q is not true or false", v)
		}
		if b {
			return []string{MetricsPortOption + "=0"}, nil
		}
		return nil, nil
	},
}

// incumbentOptions returns the options the incumbent's attributes in attrs stand for, in
// the sorted order of the attribute names.
func incumbentOptions(attrs map[string]string) ([]string, error) {
	var names []string
	for k := range attrs {
		if incumbentAttrs[k] != nil {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var opts []string
	for _, k := range names {
		o, err := incumbentAttrs[k](attrs[k])
		if err != nil {
			return nil, fmt.Errorf("volume attribute %s (the GKE driver's): %w", k, err)
		}
		for _, opt := range o {
			if _, err := Parse([]string{opt}); err != nil {
				return nil, fmt.Errorf("volume attribute %s (the GKE driver's) = %q: %w", k, attrs[k], err)
			}
		}
		opts = append(opts, o...)
	}
	return opts, nil
}
