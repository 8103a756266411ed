package mountopts

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Mapping is one input of a volume that the driver reads in another form than it was
// given: an attribute of the GKE driver's (incumbent.go), a mount option in gcsfuse's
// config-file form, or a "bucket:suffix" volume handle. It lets a migration tool
// (pkg/audit) say what each of them became without a second reading of its own that could
// drift from this one.
type Mapping struct {
	// From is the input as given: "metadataCacheTTLSeconds=600", the mount option
	// "metadata-cache:ttl-secs:-1", "volumeHandle my-bucket:a".
	From string
	// To is what it became: gcsfuse flags ("--metadata-cache-ttl-secs=600") or
	// "bucket my-bucket". Empty: accepted, and asks for nothing here (Note says why).
	To []string
	// Note says why an input that asks for nothing is accepted anyway.
	Note string
}

// String is "From -> To", "From -> To (Note)", or "From -> nothing (Note)".
func (m Mapping) String() string {
	switch {
	case len(m.To) == 0:
		return m.From + " -> nothing (" + m.Note + ")"
	case m.Note != "":
		return m.From + " -> " + strings.Join(m.To, " ") + " (" + m.Note + ")"
	}
	return m.From + " -> " + strings.Join(m.To, " ")
}

// incumbentNoops say why a GKE driver attribute whose value asks for nothing here is
// accepted (see incumbentAttrs).
var incumbentNoops = map[string]string{
	"skipCSIBucketAccessCheck":       "this driver makes no bucket access check at mount",
	"hostNetworkPodKSA":              "with Workload Identity Federation every pod, hostNetwork or not, reads as its own service account here; without it a hostNetwork pod would read as the node, and the webhook refuses it",
	"enableCloudProfilerForSidecar":  "false asks for no profiler",
	"multiNICIndex":                  "a negative index binds no NIC",
	"gcsfuseMetadataPrefetchOnMount": "false asks for no prefetch",
	"disableMetrics":                 "false keeps the volume's metrics",
}

// Explain validates a volume exactly as FromAttributes does (it calls it, with the same
// arguments) and, when the volume is accepted, lists the inputs read in another form than
// given, each with what it became, in FromAttributes' order: the handle, the config-form
// options (mount flags, then the mountOptions attribute), then the GKE driver's attributes
// in sorted order. An error is FromAttributes' own, word for word.
func Explain(attrs map[string]string, mountFlags []string, bucketFallback string) (*Volume, []Mapping, error) {
	v, err := FromAttributes(attrs, mountFlags, bucketFallback)
	if err != nil {
		return nil, nil, err
	}
	var out []Mapping
	if _, ok := attrs[contract.AttrBucketName]; !ok && v.Bucket != bucketFallback {
		out = append(out, Mapping{From: "volumeHandle " + bucketFallback, To: []string{"bucket " + v.Bucket}})
	}
	given := givenOptions(attrs, mountFlags)
	kept, pairing, err := withCacheCapacity(attrs, given)
	if err != nil {
		return nil, nil, fmt.Errorf("internal error: %w", err)
	}
	for _, opt := range given {
		if _, _, _, _, configForm, _ := splitOption(opt); !configForm || !slices.Contains(kept, opt) {
			continue
		}
		res, err := Parse([]string{opt})
		if err != nil {
			return nil, nil, fmt.Errorf("internal error: option %q accepted in the volume but not alone: %w", opt, err)
		}
		out = append(out, Mapping{From: "mount option " + opt, To: res.Flags})
	}
	if pairing != nil {
		out = append(out, *pairing)
	}
	var names []string
	for k := range attrs {
		if incumbentAttrs[k] != nil {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		opts, err := incumbentAttrs[k](attrs[k])
		if err != nil {
			return nil, nil, fmt.Errorf("internal error: attribute %s accepted in the volume but not alone: %w", k, err)
		}
		res, err := Parse(opts)
		if err != nil {
			return nil, nil, fmt.Errorf("internal error: attribute %s accepted in the volume but not alone: %w", k, err)
		}
		m := Mapping{From: k + "=" + attrs[k], To: res.Flags}
		if len(m.To) == 0 {
			m.Note = incumbentNoops[k]
		}
		out = append(out, m)
	}
	return v, out, nil
}

// CheckAccessType validates how a volume is to be mounted (its CSI volume capability):
// this driver mounts a FUSE file system, so block access and any file system type but
// FUSE's are refused. NodePublishVolume calls it, and so does pkg/audit for a
// PersistentVolume's volumeMode and fsType, so that both refuse with the same words.
func CheckAccessType(block bool, fsType string) error {
	if block {
		return fmt.Errorf("volume_capability: block access is not supported, use a filesystem volume")
	}
	if fsType != "" && fsType != "fuse" && fsType != "gcsfuse" {
		return fmt.Errorf("volume_capability.mount.fs_type %q is not supported (leave it empty)", fsType)
	}
	return nil
}
