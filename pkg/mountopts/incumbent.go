package mountopts

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Volume attributes of the incumbent GKE GCS FUSE CSI driver, accepted as aliases so that
// PersistentVolumes and inline volumes written for it work unchanged (docs/migration.md).
// Each maps onto the gcsfuse param with the same meaning, named by its config path (as the
// GKE driver itself names it) and turned into its flag through gcsfuse's parameter table by
// Parse, so that the table, not a guess, gives the flag. Each goes through the same checks
// as the option itself (a bad value names the attribute), and comes out after the
// mountOptions in a fixed order. Where this driver has no equivalent, the attribute is
// accepted only with a value that asks for nothing, and refused otherwise, saying why.

// incumbentAlias turns one attribute value into options ("" for none).
type incumbentAlias func(v string) ([]string, error)

// configOption is the config form "section:key:value" of the param at configPath
// ("metadata-cache.ttl-secs").
func configOption(configPath, value string) string {
	return strings.ReplaceAll(configPath, ".", ":") + ":" + value
}

func boolOption(configPath string) incumbentAlias {
	return func(v string) ([]string, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("value %q is not true or false", v)
		}
		return []string{configOption(configPath, strconv.FormatBool(b))}, nil
	}
}

func sizeOption(configPath string) incumbentAlias {
	return func(v string) ([]string, error) {
		mib, err := capacityMiB(v)
		if err != nil {
			return nil, err
		}
		return []string{configOption(configPath, strconv.FormatInt(mib, 10))}, nil
	}
}

func valueOption(configPath string) incumbentAlias {
	return func(v string) ([]string, error) { return []string{configOption(configPath, v)}, nil }
}

var incumbentAttrs = map[string]incumbentAlias{
	"fileCacheForRangeRead":     boolOption("file-cache.cache-file-for-range-read"),
	"metadataStatCacheCapacity": sizeOption("metadata-cache.stat-cache-max-size-mb"),
	"metadataTypeCacheCapacity": sizeOption("metadata-cache.type-cache-max-size-mb"),
	"metadataCacheTTLSeconds":   valueOption("metadata-cache.ttl-secs"),
	"gcsfuseLoggingSeverity":    valueOption("logging.severity"),
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
		return []string{configOption("metadata-cache.experimental-metadata-prefetch-on-mount", "async")}, nil
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
