package provision

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func newProvisioner(t *testing.T, endpoint string) *Provisioner {
	t.Helper()
	gcs, err := NewGCS(endpoint, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{DriverName: contract.DriverName, GCS: gcs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func options(params map[string]string, mountOptions ...string) controller.ProvisionOptions {
	return controller.ProvisionOptions{
		PVName: "pvc-1234",
		PVC: &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "team"},
			Spec: v1.PersistentVolumeClaimSpec{
				AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
				Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("5Gi")}},
			},
		},
		StorageClass: &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "gcs"}, Provisioner: contract.DriverName, Parameters: params, MountOptions: mountOptions},
	}
}

// TestProvisionMakesDirectoryAndVolume: a claim gets its own directory object, and a PV that
// mounts only it with the class's options, the claim's size and access modes, and the
// class's reclaim policy.
func TestProvisionMakesDirectoryAndVolume(t *testing.T) {
	srv := startFake(t, "data")
	p := newProvisioner(t, srv.Endpoint)
	o := options(map[string]string{"bucketName": "data", "pathPrefix": "claims", "mountOptions": "implicit-dirs"}, "uid=1000")
	retain := v1.PersistentVolumeReclaimRetain
	o.StorageClass.ReclaimPolicy = &retain
	pv, state, err := p.Provision(context.Background(), o)
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision: %v, %v", state, err)
	}
	if got := srv.names("data"); len(got) != 1 || got[0] != "claims/pvc-1234/" {
		t.Fatalf("objects %v, want the directory object claims/pvc-1234/", got)
	}
	csi := pv.Spec.CSI
	if pv.Name != "pvc-1234" || csi.Driver != contract.DriverName || csi.VolumeHandle != "data:claims/pvc-1234" ||
		csi.VolumeAttributes["mountOptions"] != "implicit-dirs,only-dir=claims/pvc-1234" || csi.VolumeAttributes["bucketName"] != "data" {
		t.Fatalf("PV %s: %+v", pv.Name, csi)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != retain || pv.Spec.AccessModes[0] != v1.ReadWriteMany ||
		pv.Spec.Capacity.Storage().String() != "5Gi" || len(pv.Spec.MountOptions) != 1 || *pv.Spec.VolumeMode != v1.PersistentVolumeFilesystem {
		t.Fatalf("PV spec %+v", pv.Spec)
	}
	// A retried Provision (the library calls again after a timeout) succeeds the same way.
	if _, _, err := p.Provision(context.Background(), o); err != nil {
		t.Fatalf("second Provision: %v", err)
	}
}

// TestProvisionRefuses: every claim that cannot work is refused with a reason the user can
// act on, and nothing is written to the bucket.
func TestProvisionRefuses(t *testing.T) {
	srv := startFake(t, "data")
	p := newProvisioner(t, srv.Endpoint)
	block := v1.PersistentVolumeBlock
	for _, tc := range []struct {
		name    string
		edit    func(*controller.ProvisionOptions)
		wantErr string
	}{
		{"missing bucket", func(o *controller.ProvisionOptions) { o.StorageClass.Parameters["bucketName"] = "nosuch" }, "bucket nosuch does not exist"},
		{"no bucket parameter", func(o *controller.ProvisionOptions) { delete(o.StorageClass.Parameters, "bucketName") }, "bucketName is required"},
		{"bad class option", func(o *controller.ProvisionOptions) { o.StorageClass.MountOptions = []string{"no-such-option"} }, "no-such-option"},
		{"only-dir in class", func(o *controller.ProvisionOptions) { o.StorageClass.Parameters["mountOptions"] = "only-dir=x" }, "given more than once"},
		{"block", func(o *controller.ProvisionOptions) { o.PVC.Spec.VolumeMode = &block }, "volumeMode Block"},
		{"clone", func(o *controller.ProvisionOptions) {
			o.PVC.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "other"}
		}, "cannot clone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options(map[string]string{"bucketName": "data"})
			tc.edit(&o)
			pv, state, err := p.Provision(context.Background(), o)
			if err == nil || pv != nil || state != controller.ProvisioningFinished || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Provision = %v, %v, %v; want a final refusal containing %q", pv, state, err, tc.wantErr)
			}
		})
	}
	if got := srv.names("data"); len(got) != 0 {
		t.Fatalf("a refused claim wrote %v", got)
	}
}

// TestProvisionForbiddenNamesIdentity: a 403 says which identity lacks which permission.
func TestProvisionForbiddenNamesIdentity(t *testing.T) {
	deny := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"error":{"code":403,"message":"caller does not have storage.buckets.get access"}}`)
	}))
	defer deny.Close()
	gcs, err := NewGCS(deny.URL+"/storage/v1/", deny.Client())
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{DriverName: contract.DriverName, GCS: gcs, Identity: "sa-x"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = p.Provision(context.Background(), options(map[string]string{"bucketName": "data"}))
	if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "sa-x lacks storage.buckets.get on bucket data") || !strings.Contains(err.Error(), "roles/storage.objectUser") {
		t.Fatalf("err = %v", err)
	}
}

// TestDeleteRemovesOnlyTheDirectory: Delete removes every object under the claim's
// directory (more than one listing page of them) and nothing beside it, and a second Delete
// (a retry) is fine.
func TestDeleteRemovesOnlyTheDirectory(t *testing.T) {
	srv := startFake(t, "data")
	p := newProvisioner(t, srv.Endpoint)
	pv, _, err := p.Provision(context.Background(), options(map[string]string{"bucketName": "data", "pathPrefix": "claims"}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range listPageSize + 5 {
		srv.put("data", fmt.Sprintf("claims/pvc-1234/f%04d", i))
	}
	for _, name := range []string{"claims/pvc-12345/keep", "claims/pvc-1234", "claims/other/keep", "top"} {
		srv.put("data", name)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(srv.names("data"), " ")
	if got != "claims/other/keep claims/pvc-1234 claims/pvc-12345/keep top" {
		t.Fatalf("left %q", got)
	}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
}

// TestDeleteRefusesForeignVolumes: a PV whose handle is not one the provisioner made (a
// whole bucket, another directory) keeps its objects.
func TestDeleteRefusesForeignVolumes(t *testing.T) {
	srv := startFake(t, "data")
	srv.put("data", "x/y")
	p := newProvisioner(t, srv.Endpoint)
	for _, handle := range []string{"data", "data:", "data:x", "data:../pvc-9", "data:/pvc-9", "data:x/../pvc-9"} {
		pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-9"},
			Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: contract.DriverName, VolumeHandle: handle}}}}
		if err := p.Delete(context.Background(), pv); err == nil || !strings.Contains(err.Error(), "left alone") {
			t.Errorf("Delete of handle %q = %v, want a refusal", handle, err)
		}
	}
	other := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-9"},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "other.csi", VolumeHandle: "data:pvc-9"}}}}
	var ignored *controller.IgnoredError
	if err := p.Delete(context.Background(), other); !errors.As(err, &ignored) {
		t.Errorf("Delete of another driver's volume = %v, want IgnoredError", err)
	}
	if got := srv.names("data"); len(got) != 1 {
		t.Fatalf("objects %v", got)
	}
}

// TestDeleteBucketGone: a volume whose bucket was deleted deletes nothing, without error.
func TestDeleteBucketGone(t *testing.T) {
	srv := startFake(t)
	p := newProvisioner(t, srv.Endpoint)
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-9"},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: contract.DriverName, VolumeHandle: "gone:pvc-9"}}}}
	if err := p.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
}

func TestConfigRefused(t *testing.T) {
	if _, err := New(Config{DriverName: "other"}); err == nil {
		t.Error("unknown driver name accepted")
	}
	if _, err := New(Config{DriverName: contract.DriverName}); err == nil {
		t.Error("no GCS accepted")
	}
	for _, ep := range []string{"ftp://x/storage/v1/", "http:///storage/v1/", "http://x/other/"} {
		if _, err := NewGCS(ep, http.DefaultClient); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
	if g, err := NewGCS("", http.DefaultClient); err != nil || g.upload != "https://storage.googleapis.com/upload/storage/v1/" {
		t.Errorf("default endpoint: %+v, %v", g, err)
	}
}

// TestGCSUnreachable: with the storage endpoint cut off, Provision makes no volume and
// Delete keeps the volume (the library retries both), each naming the call that failed.
func TestGCSUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	endpoint := srv.URL + "/storage/v1/"
	srv.Close() // nothing listens there any more
	p := newProvisioner(t, endpoint)
	pv, state, err := p.Provision(context.Background(), options(map[string]string{"bucketName": "data"}))
	if err == nil || pv != nil || state != controller.ProvisioningFinished || !strings.Contains(err.Error(), "GET ") {
		t.Fatalf("Provision = %v, %v, %v; want a refusal naming the failed call", pv, state, err)
	}
	vol := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-9"},
		Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: contract.DriverName, VolumeHandle: "data:pvc-9"}}}}
	if err := p.Delete(context.Background(), vol); err == nil || !strings.Contains(err.Error(), "deleted 0 objects") {
		t.Fatalf("Delete = %v, want an error saying nothing was deleted", err)
	}
}
