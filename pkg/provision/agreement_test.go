package provision

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestCheckClaimIsProvisionsCheck: every refusal of a claim or class is CheckClaim's, and
// Provision refuses the same claim with the same words before it asks GCS anything (a
// request to GCS fails the test), so that the audit and the provisioner cannot disagree.
func TestCheckClaimIsProvisionsCheck(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("GCS asked %s %s for a refused claim", r.Method, r.URL)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	gcs, err := NewGCS(srv.URL+"/storage/v1/", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{DriverName: contract.DriverName, GCS: gcs})
	if err != nil {
		t.Fatal(err)
	}
	block := v1.PersistentVolumeBlock
	for _, tc := range []struct {
		name    string
		edit    func(*controller.ProvisionOptions)
		wantErr string
	}{
		{"no bucket parameter", func(o *controller.ProvisionOptions) { delete(o.StorageClass.Parameters, "bucketName") },
			"StorageClass gcs: StorageClass parameter bucketName is required"},
		{"unknown parameter", func(o *controller.ProvisionOptions) { o.StorageClass.Parameters["bogus"] = "1" },
			`StorageClass gcs: StorageClass parameters: unknown volume attribute "bogus"`},
		{"secret parameter", func(o *controller.ProvisionOptions) {
			o.StorageClass.Parameters["csi.storage.k8s.io/node-publish-secret-name"] = "s"
		}, "reads no secrets"},
		{"bad class option", func(o *controller.ProvisionOptions) { o.StorageClass.MountOptions = []string{"no-such-option"} }, `StorageClass gcs: mount option "no-such-option"`},
		{"only-dir in the class's mountOptions field", func(o *controller.ProvisionOptions) { o.StorageClass.MountOptions = []string{"only-dir=x"} },
			`StorageClass gcs: mount option "only-dir=pvc-1234": given more than once`},
		{"block", func(o *controller.ProvisionOptions) { o.PVC.Spec.VolumeMode = &block }, "volumeMode Block: a bucket directory is a file system"},
		{"clone", func(o *controller.ProvisionOptions) {
			o.PVC.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "other"}
		}, "dataSource: this driver cannot clone or restore a volume"},
		{"restore", func(o *controller.ProvisionOptions) {
			o.PVC.Spec.DataSourceRef = &v1.TypedObjectReference{Kind: "VolumeSnapshot", Name: "snap"}
		}, "dataSource: this driver cannot clone or restore a volume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options(map[string]string{"bucketName": "data"})
			tc.edit(&o)
			_, checkErr := classparams.CheckClaim(o.StorageClass, o.PVC.Spec, o.PVName)
			if checkErr == nil || !strings.Contains(checkErr.Error(), tc.wantErr) {
				t.Fatalf("CheckClaim = %v, want an error containing %q", checkErr, tc.wantErr)
			}
			_, state, err := p.Provision(context.Background(), o)
			if err == nil || err.Error() != checkErr.Error() || state != controller.ProvisioningFinished {
				t.Fatalf("Provision = %v, %v; want CheckClaim's refusal %q", state, err, checkErr)
			}
		})
	}
	if _, err := classparams.CheckClaim(nil, v1.PersistentVolumeClaimSpec{}, classparams.ExampleVolumeName); err == nil {
		t.Error("no class accepted")
	}
}
