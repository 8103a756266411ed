package classparams

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestCheckClaimAccepts: a claim CheckClaim accepts gets the directory, attributes and
// reclaim policy Provision gives its PersistentVolume; a class without a policy is Delete.
func TestCheckClaimAccepts(t *testing.T) {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "gcs"}, Provisioner: contract.DriverName,
		Parameters: map[string]string{"bucketName": "data", "pathPrefix": "/claims/", "mountOptions": "implicit-dirs"}, MountOptions: []string{"uid=1000"}}
	c, err := CheckClaim(sc, v1.PersistentVolumeClaimSpec{}, ExampleVolumeName)
	if err != nil {
		t.Fatal(err)
	}
	if c.Class.Bucket != "data" || c.Dir != "claims/"+ExampleVolumeName || c.Attributes["mountOptions"] != "implicit-dirs,only-dir=claims/"+ExampleVolumeName ||
		c.VolumeHandle != "data:claims/"+ExampleVolumeName || c.ReclaimPolicy != v1.PersistentVolumeReclaimDelete {
		t.Fatalf("CheckClaim = %+v", c)
	}
	retain := v1.PersistentVolumeReclaimRetain
	sc.ReclaimPolicy = &retain
	fs := v1.PersistentVolumeFilesystem
	if c, err := CheckClaim(sc, v1.PersistentVolumeClaimSpec{VolumeMode: &fs}, "pvc-1"); err != nil || c.ReclaimPolicy != retain || c.Dir != "claims/pvc-1" {
		t.Fatalf("CheckClaim = %+v, %v", c, err)
	}
}
