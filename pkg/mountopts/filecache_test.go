package mountopts

import (
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
		{"PV spec.mountOptions, one entry of several", nil, []string{"implicit-dirs,file-cache:enable-parallel-downloads:true"}, true},
		{"PV spec.mountOptions, flag form", nil, []string{"file-cache-max-size-mb=10"}, true},
		{"size 0 is off", nil, []string{"file-cache:max-size-mb:0", "file-cache:enable-parallel-downloads:true"}, false},
		{"other sections", map[string]string{contract.AttrMountOptions: "metadata-cache:ttl-secs:60"}, []string{"implicit-dirs"}, false},
		{"GKE range-read attribute alone", map[string]string{"fileCacheForRangeRead": "true"}, nil, false},
		{"an option the node refuses", nil, []string{"no-such-option", "file-cache:max-size-mb:5"}, true},
	} {
		if got := WantsFileCache(tc.attrs, tc.flags); got != tc.want {
			t.Errorf("%s: WantsFileCache(%v, %q) = %v, want %v", tc.name, tc.attrs, tc.flags, got, tc.want)
		}
	}
}
