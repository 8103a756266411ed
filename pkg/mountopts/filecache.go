package mountopts

import (
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// fileCacheSection is the section of gcsfuse's config file that holds the file cache's
// settings (file-cache.max-size-mb, file-cache.enable-parallel-downloads, ...).
const fileCacheSection = "file-cache."

// WantsFileCache reports whether a volume asks for gcsfuse's file cache, however it says
// so: the fileCacheCapacity attribute, or a file-cache option, in either form ("file-cache:max-size-mb:100" or "file-cache-max-size-mb=100"),
// in the mountOptions attribute or in mountFlags (a PersistentVolume's spec.mountOptions,
// which a StorageClass's mountOptions become), except a max-size-mb of 0, which turns it off.
// The webhook asks it to give the sidecar a cache volume, and gcsfuse a --cache-dir; the
// node plugin's checks of the options (FromAttributes) are not repeated: an option it
// refuses fails the mount anyway. The GKE driver's other attributes (fileCacheForRangeRead)
// tune a cache that fileCacheCapacity turns on, as there.
func WantsFileCache(attrs map[string]string, mountFlags []string) bool {
	if _, ok := attrs[contract.AttrFileCacheCapacity]; ok {
		return true
	}
	wants := false
	for _, opt := range givenOptions(attrs, mountFlags) {
		o, name, value, _, _, err := splitOption(opt)
		if err != nil || o == nil || !strings.HasPrefix(o.param.ConfigPath, fileCacheSection) {
			continue
		}
		if o.param.ConfigPath == fileCacheSection+"max-size-mb" && strings.TrimSpace(value) == "0" {
			return false
		}
		wants = wants || name != ""
	}
	return wants
}
