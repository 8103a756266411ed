// Package classparams says what a StorageClass of this driver means: which bucket its
// claims live in, under which directory, which volume attributes the PersistentVolumes
// provisioned for it carry, and which claims it cannot provision (CheckClaim). The
// provisioner (pkg/provision) makes volumes from it, the webhook (pkg/webhook) reads it to
// recognise a claim of the driver before it is bound, and the audit (pkg/audit) judges
// classes and claims by it, so all three read one definition. It imports no client, so
// that kubectl-gcsfuse links none of the provisioner's.
//
// A claim of the class gets a directory of its own in the class's bucket,
// <pathPrefix>/<volume name>, mounted with only-dir: what one claim writes, no other claim
// sees, and deleting the claim (reclaim policy Delete) deletes that directory's objects.
package classparams

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// ParamPathPrefix is the StorageClass parameter naming the bucket directory under which
// every claim of the class gets its own directory ("" or absent: the bucket's root).
const ParamPathPrefix = "pathPrefix"

// ReservedParamPrefix starts the StorageClass parameters the external-provisioner
// convention reserves (secrets and the like): never volume attributes.
const ReservedParamPrefix = "csi.storage.k8s.io/"

// AttributeParams are the parameters of a class that become volume attributes, whether or
// not the class is valid: all but pathPrefix and the reserved keys. The webhook reads a
// class that Parse refuses this way (its pods still need their sidecar once the class is
// fixed).
func AttributeParams(params map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range params {
		if k != ParamPathPrefix && !strings.HasPrefix(k, ReservedParamPrefix) {
			out[k] = v
		}
	}
	return out
}

// onlyDirOption is the gcsfuse option that mounts one directory of the bucket.
const onlyDirOption = "only-dir"

// Class is a StorageClass's parameters, validated.
type Class struct {
	// Bucket is the bucket every claim of the class lives in.
	Bucket string
	// PathPrefix is the directory under which each claim's directory is made, without
	// leading or trailing slashes ("" for the bucket's root).
	PathPrefix string
	// Attributes are the volume attributes every PersistentVolume of the class carries,
	// before the claim's only-dir is added (VolumeAttributes gives a claim's own).
	Attributes map[string]string
}

// Parse validates a StorageClass's parameters. Keys the external-provisioner convention
// reserves (csi.storage.k8s.io/...) are refused rather than ignored: this driver reads no
// secrets at provisioning, and a class that names one would get a silent success. Every
// other key must be one the node plugin accepts as a volume attribute, with bucketName
// required, and the options must be ones it mounts with: a class that cannot mount is
// refused when a claim is provisioned, not when a pod starts.
func Parse(params map[string]string) (*Class, error) {
	c := &Class{Attributes: AttributeParams(params)}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := params[k]
		switch {
		case k == ParamPathPrefix:
			p, err := cleanPrefix(v)
			if err != nil {
				return nil, err
			}
			c.PathPrefix = p
		case strings.HasPrefix(k, ReservedParamPrefix):
			return nil, fmt.Errorf("StorageClass parameter %q: this driver reads no secrets when it provisions (it makes a directory in a bucket with its own identity); give pods their identity through the volume attributes or the pod's service account", k)
		}
	}
	b, ok := c.Attributes[contract.AttrBucketName]
	if !ok || b == "" {
		return nil, fmt.Errorf("StorageClass parameter %s is required: the bucket the claims' directories are made in", contract.AttrBucketName)
	}
	c.Bucket = b
	// The node plugin's own check, on what a claim's volume would carry (only-dir included,
	// so that a class giving only-dir itself is refused as "given more than once").
	if _, err := mountopts.FromAttributes(c.VolumeAttributes(c.Dir("pvc-check")), nil, ""); err != nil {
		return nil, fmt.Errorf("StorageClass parameters: %w", err)
	}
	return c, nil
}

// cleanPrefix validates a pathPrefix: a relative path of the characters only-dir allows,
// without "." or ".." elements.
func cleanPrefix(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	elems := strings.Split(p, "/")
	if slices.Contains(elems, "..") || slices.Contains(elems, ".") || slices.Contains(elems, "") {
		return "", fmt.Errorf("StorageClass parameter %s %q: want a directory path without . or .. elements", ParamPathPrefix, p)
	}
	if _, err := mountopts.Parse([]string{onlyDirOption + "=" + p}); err != nil {
		return "", fmt.Errorf("StorageClass parameter %s %q: %w", ParamPathPrefix, p, err)
	}
	return p, nil
}

// Dir is the bucket directory of the volume named volumeName (the PersistentVolume's name,
// pvc-<claim uid>).
func (c *Class) Dir(volumeName string) string {
	return path.Join(c.PathPrefix, volumeName)
}

// VolumeAttributes is a copy of the class's attributes with dir's only-dir appended to its
// mountOptions: the volume attributes of the claim whose directory is dir.
func (c *Class) VolumeAttributes(dir string) map[string]string {
	out := make(map[string]string, len(c.Attributes)+1)
	for k, v := range c.Attributes {
		out[k] = v
	}
	opt := onlyDirOption + "=" + dir
	if mo := out[contract.AttrMountOptions]; mo != "" {
		out[contract.AttrMountOptions] = mo + "," + opt
	} else {
		out[contract.AttrMountOptions] = opt
	}
	return out
}
