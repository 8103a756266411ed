// Package provision is the driver's dynamic provisioner: for every PersistentVolumeClaim of
// a StorageClass whose provisioner is the driver, it makes the claim a directory of its own
// in the class's bucket and a PersistentVolume that mounts only that directory (only-dir);
// when such a volume is released with reclaim policy Delete, it deletes the directory's
// objects. pkg/classparams says what a class's parameters mean; the controller loop (watch
// claims, create and delete PersistentVolumes, Events, retries) is
// sigs.k8s.io/sig-storage-lib-external-provisioner's, run by cmd/gcsfuse-csi-controller.
//
// A bucket has no size: the volume's capacity is what the claim asked for, and nothing
// enforces it. A bucket is not made here: the class names one that exists, which keeps the
// provisioner's identity to object rights on that bucket (roles/storage.objectUser), not
// bucket creation in a project.
package provision

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Config configures a Provisioner.
type Config struct {
	// DriverName is the CSI driver the volumes are for, and the provisioner name classes
	// name.
	DriverName string
	// GCS is the storage the buckets are in, with the provisioner's identity.
	GCS *GCS
	// Identity describes that identity in errors ("Application Default Credentials of
	// ..."), so that a refusal says whom to grant what.
	Identity string
	// Log receives a line per volume provisioned or deleted, with its timing.
	Log *slog.Logger
}

// Provisioner implements controller.Provisioner for the driver.
type Provisioner struct{ cfg Config }

var _ controller.Provisioner = (*Provisioner)(nil)

// New validates cfg and returns the provisioner.
func New(cfg Config) (*Provisioner, error) {
	if err := contract.ValidateDriverName(cfg.DriverName); err != nil {
		return nil, err
	}
	if cfg.GCS == nil {
		return nil, errors.New("provisioner: no GCS client")
	}
	if cfg.Identity == "" {
		cfg.Identity = "the provisioner's identity"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Provisioner{cfg: cfg}, nil
}

// Provision makes the claim's directory and returns its PersistentVolume. Every refusal of
// the claim itself (bad class, block mode, missing bucket, no rights) is final: the library
// records it as a ProvisioningFailed Event on the claim and retries with back-off, so a
// bucket made or a right granted later is picked up without touching the claim. What it
// checks of the claim and its class alone is classparams.CheckClaim, which the audit runs too.
func (p *Provisioner) Provision(ctx context.Context, o controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	start := time.Now()
	if o.PVC == nil || o.StorageClass == nil {
		return nil, controller.ProvisioningFinished, errors.New("no claim or class to provision for")
	}
	c, err := classparams.CheckClaim(o.StorageClass, o.PVC.Spec, o.PVName)
	if err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	class, dir, attrs := c.Class, c.Dir, c.Attributes
	if err := p.cfg.GCS.CheckBucket(ctx, class.Bucket); err != nil {
		return nil, controller.ProvisioningFinished, p.explain(err, class.Bucket, "storage.buckets.get")
	}
	if err := p.cfg.GCS.CreateDir(ctx, class.Bucket, dir); err != nil {
		return nil, controller.ProvisioningFinished, p.explain(err, class.Bucket, "storage.objects.create")
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: c.ReclaimPolicy,
			AccessModes:                   o.PVC.Spec.AccessModes,
			MountOptions:                  o.StorageClass.MountOptions,
			Capacity:                      v1.ResourceList{v1.ResourceStorage: o.PVC.Spec.Resources.Requests[v1.ResourceStorage]},
			VolumeMode:                    ptr(v1.PersistentVolumeFilesystem),
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver:           p.cfg.DriverName,
				VolumeHandle:     c.VolumeHandle,
				VolumeAttributes: attrs,
			}},
		},
	}
	p.cfg.Log.Info("provisioned", "volume", o.PVName, "claim", o.PVC.Namespace+"/"+o.PVC.Name,
		"class", o.StorageClass.Name, "directory", "gs://"+class.Bucket+"/"+dir+"/", "took", time.Since(start).Round(time.Millisecond).String())
	return pv, controller.ProvisioningFinished, nil
}

// Delete deletes the objects of a volume this provisioner made. A volume whose handle is
// not "bucket:dir" with dir ending in the volume's own name is refused: the provisioner
// never deletes a bucket's root or a directory it did not make.
func (p *Provisioner) Delete(ctx context.Context, pv *v1.PersistentVolume) error {
	start := time.Now()
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != p.cfg.DriverName {
		return &controller.IgnoredError{Reason: "not a volume of " + p.cfg.DriverName}
	}
	bucket, dir, ok := strings.Cut(pv.Spec.CSI.VolumeHandle, classparams.HandleSeparator)
	if !ok || bucket == "" || path.Base(dir) != pv.Name || path.Clean(dir) != dir || strings.HasPrefix(dir, "/") || strings.Contains(dir, "..") {
		return fmt.Errorf("volume %s: handle %q is not one this provisioner made (bucket:<dir>/%s); its objects are left alone", pv.Name, pv.Spec.CSI.VolumeHandle, pv.Name)
	}
	n, err := p.cfg.GCS.DeleteDir(ctx, bucket, dir)
	if err != nil {
		return fmt.Errorf("volume %s: deleted %d objects, then: %w", pv.Name, n, p.explain(err, bucket, "storage.objects.delete"))
	}
	p.cfg.Log.Info("deleted", "volume", pv.Name, "directory", "gs://"+bucket+"/"+dir+"/", "objects", n,
		"took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// explain adds to a refusal what to do about it.
func (p *Provisioner) explain(err error, bucket, permission string) error {
	switch {
	case errors.Is(err, ErrBucketNotFound):
		return fmt.Errorf("%w: bucket %s does not exist; the class names a bucket that must exist (the provisioner makes directories, not buckets)", err, bucket)
	case errors.Is(err, ErrForbidden):
		return fmt.Errorf("%w: %s lacks %s on bucket %s; grant it roles/storage.objectUser (or a role with storage.buckets.get, storage.objects.create, list and delete) on the bucket", err, p.cfg.Identity, permission, bucket)
	}
	return err
}

func ptr[T any](v T) *T { return &v }
