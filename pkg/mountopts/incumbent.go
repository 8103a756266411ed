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
	// The GKE driver's legacy spelling, which it still reads (incumbentSpellings).
	"metadataCacheTtlSeconds": valueOption("metadata-cache.ttl-secs"),
	"gcsfuseLoggingSeverity":  valueOption("logging.severity"),
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
	// The GKE driver can start Cloud Profiler in its sidecar. This driver's sidecar has no
	// profiler and sends nothing to Google but gcsfuse's own requests, so only "false" (ask
	// for nothing) is accepted: "true" would be silently ignored otherwise.
	"enableCloudProfilerForSidecar": func(v string) ([]string, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("value %q is not true or false", v)
		}
		if b {
			return nil, fmt.Errorf("value %q: this driver's sidecar has no Cloud Profiler (only \"false\" is accepted)", v)
		}
		return nil, nil
	},
	// The GKE driver's multiNICIndex N >= 0 binds the volume's gcsfuse to the node's NIC of
	// NUMA node N (0 included: the first one): it adds source routing rules on the node and
	// passes gcsfuse a local socket address, for hostNetwork pods on multi-NIC machines.
	// This driver's gcsfuse runs in the pod's sidecar and the node plugin never changes the
	// node's routing, so only a negative index, the GKE driver's "no NIC binding", is
	// accepted.
	"multiNICIndex": func(v string) ([]string, error) {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("value %q is not an integer", v)
		}
		if n >= 0 {
			return nil, fmt.Errorf("value %q: binding gcsfuse to a NIC is not supported (the node plugin does not change the node's routing; only a negative index, no binding, is accepted)", v)
		}
		return nil, nil
	},
	// The GKE driver's hostNetworkPodKSA: "true" makes a hostNetwork pod's gcsfuse exchange
	// the pod's own service account token instead of asking the metadata server (which
	// cannot tell such a pod from its node). Here a volume's identity never depends on the
	// pod's network: with Workload Identity Federation (the volume's identityProvider or
	// workloadIdentityProvider, or the node plugin's --wif-provider) every pod, hostNetwork
	// or not, gets its own token from the kubelet (pkg/credentials). So either value asks
	// for no gcsfuse option; a value that is not a boolean is refused. "true" on a
	// hostNetwork pod without a provider is warned of at admission (pkg/webhook): with
	// Application Default Credentials such a pod reads as the node.
	"hostNetworkPodKSA": func(v string) ([]string, error) {
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

// incumbentSpellings are attributes the GKE driver reads under two spellings; both on one
// volume are refused as given twice, like an alias and its option, rather than one
// silently winning.
var incumbentSpellings = [][2]string{{"metadataCacheTTLSeconds", "metadataCacheTtlSeconds"}}

// incumbentOptions returns the options the incumbent's attributes in attrs stand for, in
// the sorted order of the attribute names.
func incumbentOptions(attrs map[string]string) ([]string, error) {
	for _, sp := range incumbentSpellings {
		_, a := attrs[sp[0]]
		_, b := attrs[sp[1]]
		if a && b {
			return nil, fmt.Errorf("volume attributes %s = %q and %s = %q (the GKE driver's two spellings of one attribute): given more than once",
				sp[0], attrs[sp[0]], sp[1], attrs[sp[1]])
		}
	}
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
