package classparams

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// ExampleVolumeName has the shape of the name the controller gives a claim's
// PersistentVolume (pvc-<claim uid>), for a check made before the claim exists (the audit
// of a manifest, of a class, of a StatefulSet's volumeClaimTemplate).
const ExampleVolumeName = "pvc-00000000-0000-0000-0000-000000000000"

// Claim is what the provisioner (pkg/provision) makes of a claim CheckClaim accepts.
type Claim struct {
	// Class is the StorageClass's parameters.
	Class *Class
	// Dir is the claim's directory in Class.Bucket, <pathPrefix>/<volume name>.
	Dir string
	// Attributes are the volume attributes of the claim's PersistentVolume: the class's,
	// with Dir's only-dir.
	Attributes map[string]string
	// VolumeHandle is its PersistentVolume's handle, "<bucket>:<dir>".
	VolumeHandle string
	// ReclaimPolicy is the PersistentVolume's: the class's, Delete when it sets none.
	ReclaimPolicy v1.PersistentVolumeReclaimPolicy
}

// CheckClaim is every check the provisioner's Provision makes of a claim and its class before it touches a
// bucket, in its order and with its words: a claim in volumeMode Block, one with a
// dataSource or dataSourceRef (clone, restore), a class whose parameters classparams.Parse
// refuses, and one whose mountOptions field, with the claim's volume attributes, is not what
// the node plugin mounts with (mountopts.FromAttributes) are refused. volumeName is the
// claim's PersistentVolume's name, which its directory is named after (ExampleVolumeName
// before the claim exists). It reads nothing but its arguments, so that the audit (pkg/audit)
// judges a claim, a class or a claim template by the provisioner's own decision.
//
// What it cannot tell is the bucket's: whether it exists and the provisioner may write to
// it, which Provision asks GCS next.
func CheckClaim(sc *storagev1.StorageClass, claim v1.PersistentVolumeClaimSpec, volumeName string) (*Claim, error) {
	if sc == nil {
		return nil, errors.New("no class to provision for")
	}
	if claim.VolumeMode != nil && *claim.VolumeMode == v1.PersistentVolumeBlock {
		return nil, errors.New("volumeMode Block: a bucket directory is a file system; use volumeMode Filesystem")
	}
	if claim.DataSource != nil || claim.DataSourceRef != nil {
		return nil, errors.New("dataSource: this driver cannot clone or restore a volume; copy the objects with gcloud storage cp instead")
	}
	class, err := Parse(sc.Parameters)
	if err != nil {
		return nil, fmt.Errorf("StorageClass %s: %w", sc.Name, err)
	}
	dir := class.Dir(volumeName)
	attrs := class.VolumeAttributes(dir)
	// What the node plugin will mount with: the class's mountOptions field too.
	if _, err := mountopts.FromAttributes(attrs, sc.MountOptions, ""); err != nil {
		return nil, fmt.Errorf("StorageClass %s: %w", sc.Name, err)
	}
	return &Claim{Class: class, Dir: dir, Attributes: attrs, VolumeHandle: class.Bucket + HandleSeparator + dir,
		ReclaimPolicy: reclaimPolicy(sc.ReclaimPolicy)}, nil
}

// HandleSeparator joins the bucket and the directory in a provisioned volume's handle,
// "bucket:dir": the node plugin takes the bucket from the handle's part before it, the
// directory comes from the volume's only-dir, and the provisioner's Delete reads both back
// from it.
const HandleSeparator = ":"

// reclaimPolicy is the class's policy, Delete when it sets none (as Kubernetes defaults).
func reclaimPolicy(p *v1.PersistentVolumeReclaimPolicy) v1.PersistentVolumeReclaimPolicy {
	if p == nil {
		return v1.PersistentVolumeReclaimDelete
	}
	return *p
}
