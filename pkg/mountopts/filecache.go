package mountopts

import (
	"strconv"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// fileCacheSection is the section of gcsfuse's config file that holds the file cache's
// settings (file-cache.max-size-mb, file-cache.enable-parallel-downloads, ...).
const fileCacheSection = "file-cache."

// WantsFileCache reports whether a volume asks for gcsfuse's file cache, however it says
// so: the fileCacheCapacity attribute, or a file cache size (max-size-mb) other than 0 in
// either form ("file-cache:max-size-mb:100" or "file-cache-max-size-mb=100"), in the
// mountOptions attribute or in mountFlags (a PersistentVolume's spec.mountOptions, which a
// StorageClass's mountOptions become), resolved as FromAttributes resolves them: the rule of
// FlagsWantFileCache, by which the sidecar gives gcsfuse its --cache-dir, applied to the
// flags the volume's options become. The webhook asks it to give the sidecar a cache
// volume. The node plugin's checks are not repeated: an option it refuses is left out here
// (one that fails the mount anyway).
func WantsFileCache(attrs map[string]string, mountFlags []string) bool {
	opts, _, err := withCacheCapacity(attrs, givenOptions(attrs, mountFlags))
	if err != nil {
		return false
	}
	var flags []string
	for _, opt := range opts {
		if res, err := Parse([]string{opt}); err == nil {
			flags = append(flags, res.Flags...)
		}
	}
	return FlagsWantFileCache(flags)
}

// FlagsWantFileCache reports whether gcsfuse's flags turn its file cache on: a
// --file-cache-max-size-mb other than 0 (-1: no limit). gcsfuse keeps a file cache only in
// a --cache-dir, which the sidecar then gives it.
func FlagsWantFileCache(flags []string) bool {
	for _, f := range flags {
		if strings.HasPrefix(f, "--file-cache-max-size-mb=") && f != "--file-cache-max-size-mb=0" {
			return true
		}
	}
	return false
}

// cacheSizeOption is the config-form option the GKE driver makes of fileCacheCapacity.
const cacheSizeOption = "file-cache:max-size-mb:"

// cacheSizePairing resolves the GKE driver's documented pairing of the fileCacheCapacity
// attribute (capacity MiB) with a file cache size among opts (a max-size-mb option, either
// form), the way that driver does: it hands both to gcsfuse, the attribute as
// "file-cache:max-size-mb:<MiB>", in its options' sorted order, and the last one read wins;
// an option in the flag form is a command-line flag there, which wins over any config
// entry. It returns opts with the loser left out and the size flag appended when the
// attribute wins, and pairing, set when both were given, saying which won (pkg/audit prints
// it). Without a size option among opts, the attribute's flag is appended.
func cacheSizePairing(opts []string, capacity int64) (out []string, pairing *Mapping) {
	attrFlag := "file-cache-max-size-mb=" + strconv.FormatInt(capacity, 10)
	attrForm := cacheSizeOption + strconv.FormatInt(capacity, 10)
	for i, opt := range opts {
		o, _, _, _, configForm, err := splitOption(opt)
		if err != nil || o == nil || o.param.ConfigPath != fileCacheSection+"max-size-mb" {
			continue
		}
		m := &Mapping{From: "volume attribute " + contract.AttrFileCacheCapacity + " (" + attrForm + ") and mount option " + opt}
		if !configForm || opt > attrForm {
			res, err := Parse([]string{opt})
			if err != nil {
				return opts, nil // refused with the rest (FromAttributes)
			}
			m.To = res.Flags
			m.Note = "the mount option wins, as with the GKE driver"
			return opts, m
		}
		out = append(append(append(out, opts[:i]...), opts[i+1:]...), attrFlag)
		m.To = []string{"--" + attrFlag}
		m.Note = "the attribute wins, as with the GKE driver"
		return out, m
	}
	return append(opts, attrFlag), nil
}
