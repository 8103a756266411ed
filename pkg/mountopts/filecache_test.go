package mountopts

import (
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Every way a volume can ask for the file cache is seen, wherever it is written: the
// attribute, the mountOptions attribute and a PersistentVolume's spec.mountOptions, in the
// config form and the flag form; a size of 0 is off, and options of other sections are not
// the cache.
func TestWantsFileCache(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs map[string]string
		flags []string
		want  bool
	}{
		{"nothing", nil, nil, false},
		{"capacity attribute", map[string]string{contract.AttrFileCacheCapacity: "1Gi"}, nil, true},
		{"attribute, config form", map[string]string{contract.AttrMountOptions: "implicit-dirs,file-cache:max-size-mb:100"}, nil, true},
		{"attribute, flag form", map[string]string{contract.AttrMountOptions: "file-cache-max-size-mb=100"}, nil, true},
		{"PV spec.mountOptions, config form", nil, []string{"implicit-dirs", "file-cache:max-size-mb:-1"}, true},
		{"PV spec.mountOptions, one entry of several", nil, []string{"implicit-dirs,file-cache:max-size-mb:10"}, true},
		// gcsfuse keeps no cache without a size: the sidecar gives no --cache-dir either.
		{"a cache setting without a size", nil, []string{"file-cache:enable-parallel-downloads:true"}, false},
		{"PV spec.mountOptions, flag form", nil, []string{"file-cache-max-size-mb=10"}, true},
		{"size 0 is off", nil, []string{"file-cache:max-size-mb:0", "file-cache:enable-parallel-downloads:true"}, false},
		{"capacity, and a size 0 flag, which wins", map[string]string{contract.AttrFileCacheCapacity: "1Gi"}, []string{"file-cache-max-size-mb=0"}, false},
		{"other sections", map[string]string{contract.AttrMountOptions: "metadata-cache:ttl-secs:60"}, []string{"implicit-dirs"}, false},
		{"GKE range-read attribute alone", map[string]string{"fileCacheForRangeRead": "true"}, nil, false},
		{"an option the node refuses", nil, []string{"no-such-option", "file-cache:max-size-mb:5"}, true},
	} {
		if got := WantsFileCache(tc.attrs, tc.flags); got != tc.want {
			t.Errorf("%s: WantsFileCache(%v, %q) = %v, want %v", tc.name, tc.attrs, tc.flags, got, tc.want)
		}
	}
}

// The GKE driver's documented pairing of fileCacheCapacity with a size in mountOptions is
// accepted and resolved as that driver does (the option that sorts last among its config
// entries, a command-line flag over any), never refused as given twice; Explain says which
// won.
func TestCacheSizePairing(t *testing.T) {
	for _, tc := range []struct {
		name, capacity, option, want, note string
	}{
		{"the attribute sorts last", "1Gi", "file-cache:max-size-mb:100", "--file-cache-max-size-mb=1024", "the attribute wins"},
		{"the option sorts last", "100Mi", "file-cache:max-size-mb:50", "--file-cache-max-size-mb=50", "the mount option wins"},
		{"the flag form is a flag there", "1Gi", "file-cache-max-size-mb=7", "--file-cache-max-size-mb=7", "the mount option wins"},
	} {
		attrs := map[string]string{contract.AttrBucketName: "bkt", contract.AttrFileCacheCapacity: tc.capacity,
			contract.AttrMountOptions: "implicit-dirs," + tc.option}
		v, mappings, err := Explain(attrs, nil, "")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var sizes []string
		for _, f := range v.Flags {
			if strings.HasPrefix(f, "--file-cache-max-size-mb=") {
				sizes = append(sizes, f)
			}
		}
		if len(sizes) != 1 || sizes[0] != tc.want {
			t.Errorf("%s: size flags %q, want %s alone", tc.name, sizes, tc.want)
		}
		said := false
		for _, m := range mappings {
			said = said || (strings.Contains(m.String(), tc.option) && strings.Contains(m.String(), tc.note))
		}
		if !said {
			t.Errorf("%s: no mapping says %q of %s: %v", tc.name, tc.note, tc.option, mappings)
		}
	}
}
