// Package storagee2e runs Kubernetes' storage testsuites (k8s.io/kubernetes/test/e2e/storage)
// against this driver through a Go test driver, which the YAML driver definition of the
// External Storage suite cannot express: pre-provisioned PersistentVolumes (one bucket of the
// local cluster's GCS emulator per test, made here and deleted after it) besides CSI inline
// ephemeral volumes, and dynamically provisioned ones (the driver's controller, a directory
// per claim in the test's bucket), through claims and generic ephemeral volumes. The suite
// decides what runs from the capabilities declared below, so each says why it is true or
// false.
package storagee2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/onsi/ginkgo/v2"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/test/e2e/framework"
	e2eskipper "k8s.io/kubernetes/test/e2e/framework/skipper"
	storageframework "k8s.io/kubernetes/test/e2e/storage/framework"
)

// DriverName is the CSI driver's name as deployed on the local cluster.
const DriverName = "gcsfuse.csi.storage"

// emulatorCallTimeout bounds each call to the emulator's JSON API.
const emulatorCallTimeout = 30 * time.Second

// Driver is the Go test driver. Emulator is the GCS emulator's base URL as the host running
// the suite reaches it (the node plugin's gcsEndpoint, on the node's address).
type Driver struct {
	info     storageframework.DriverInfo
	Emulator string
	client   *http.Client
	// volumes numbers the pre-provisioned volumes, so that two of one test never share a
	// bucket (createBucket takes an existing bucket as made).
	volumes atomic.Uint64
}

var (
	_ storageframework.TestDriver                     = (*Driver)(nil)
	_ storageframework.PreprovisionedVolumeTestDriver = (*Driver)(nil)
	_ storageframework.PreprovisionedPVTestDriver     = (*Driver)(nil)
	_ storageframework.EphemeralTestDriver            = (*Driver)(nil)
	_ storageframework.DynamicPVTestDriver            = (*Driver)(nil)
)

// NewDriver returns the driver for the emulator at emulatorURL.
func NewDriver(emulatorURL string) (*Driver, error) {
	u, err := url.Parse(emulatorURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("emulator URL %q: want http(s)://host:port", emulatorURL)
	}
	return &Driver{
		Emulator: strings.TrimSuffix(emulatorURL, "/"),
		client:   &http.Client{Timeout: emulatorCallTimeout},
		info: storageframework.DriverInfo{
			Name: DriverName,
			// gcsfuse is a file system over a bucket: there is no fsType to choose.
			SupportedFsType: sets.NewString(""),
			// A mount option a StorageClass may carry in its mountOptions: the provisioning
			// suite's "with mount options" test gives it to a class and then looks for it in
			// the mount table, where only the kernel's options of a FUSE mount show (gcsfuse's
			// own, such as implicit-dirs, never do).
			SupportedMountOption: sets.NewString("rw"),
			Capabilities: map[storageframework.Capability]bool{
				// A bucket's objects outlive the pods: what one pod wrote, the next reads.
				storageframework.CapPersistence: true,
				// Many pods, on one node or many, mount one bucket read/write at once.
				storageframework.CapMultiPODs:    true,
				storageframework.CapRWX:          true,
				storageframework.CapReadOnlyMany: true,
				// Two PVs may name the same bucket (the volume handle).
				storageframework.CapMultiplePVsSameID: true,
				// The node plugin advertises VOLUME_MOUNT_GROUP and gives the pod's fsGroup
				// the files (group-writable), but chown and chmod change nothing: the suite's
				// fsGroup checks of ownership changes do not hold, so not declared.
				storageframework.CapFsGroup:          false,
				storageframework.CapVolumeMountGroup: false,
				// Files have a fixed mode (0644 unless file-mode says otherwise): no exec of
				// a file just written and chmodded.
				storageframework.CapExec: false,
				// A bucket has no blocks, snapshots, clones, sizes, capacity or topology:
				// the provisioner makes a directory per claim, nothing else.
				storageframework.CapBlock:               false,
				storageframework.CapSnapshotDataSource:  false,
				storageframework.CapVolumeGroupSnapshot: false,
				storageframework.CapPVCDataSource:       false,
				storageframework.CapControllerExpansion: false,
				storageframework.CapNodeExpansion:       false,
				storageframework.CapOnlineExpansion:     false,
				storageframework.CapOfflineExpansion:    false,
				storageframework.CapVolumeLimits:        false,
				storageframework.CapSingleNodeVolume:    false,
				storageframework.CapTopology:            false,
				storageframework.CapCapacity:            false,
				storageframework.CapReadWriteOncePod:    false,
			},
			RequiredAccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany},
		},
	}, nil
}

// GetDriverInfo returns the static description of the driver.
func (d *Driver) GetDriverInfo() *storageframework.DriverInfo { return &d.info }

// SkipUnsupportedTest skips what the driver cannot run: in-tree inline volumes (a CSI
// driver has none) and block mode.
func (d *Driver) SkipUnsupportedTest(p storageframework.TestPattern) {
	switch p.VolType {
	case storageframework.PreprovisionedPV, storageframework.CSIInlineVolume,
		storageframework.DynamicPV, storageframework.GenericEphemeralVolume:
	default:
		e2eskipper.Skipf("%s: volume type %s is an in-tree volume; this is a CSI driver", DriverName, p.VolType)
	}
	if p.VolMode == v1.PersistentVolumeBlock {
		e2eskipper.Skipf("%s: a bucket has no block mode", DriverName)
	}
}

// PrepareTest makes the test's bucket, named for its namespace, for the inline volumes
// (GetVolume) and the dynamically provisioned ones (a directory each), and deletes it with
// its objects when the test ends.
func (d *Driver) PrepareTest(ctx context.Context, f *framework.Framework) *storageframework.PerTestConfig {
	config := &storageframework.PerTestConfig{Driver: d, Prefix: "gcsfuse", Framework: f}
	bucket := inlineBucket(config)
	framework.ExpectNoError(d.createBucket(ctx, bucket), "bucket %s in the emulator", bucket)
	ginkgo.DeferCleanup(d.deleteBucket, bucket)
	return config
}

// inlineBucket names the bucket of the test's inline volumes: one per test namespace.
func inlineBucket(config *storageframework.PerTestConfig) string {
	return bucketName("inline-", config.Framework.Namespace.Name)
}

// bucketName is a valid bucket name (3-63 lower-case letters, digits, dashes) from prefix
// and a namespace name.
func bucketName(prefix, ns string) string {
	name := strings.ToLower(prefix + ns)
	if len(name) > 63 {
		name = name[:63]
	}
	return strings.TrimRight(name, "-")
}

// GetVolume returns inline volume n's attributes: the test's bucket, shared by every pod of
// the test (what one writes, the others read), read/write.
func (d *Driver) GetVolume(config *storageframework.PerTestConfig, _ int) (map[string]string, bool, bool) {
	return map[string]string{"bucketName": inlineBucket(config)}, true, false
}

// GetDynamicProvisionStorageClass returns a class of the driver's provisioner whose claims
// get a directory each in the test's bucket, with sharedWriterOptions (the suites' multi-pod
// tests read at once what another pod wrote).
func (d *Driver) GetDynamicProvisionStorageClass(_ context.Context, config *storageframework.PerTestConfig, _ string) *storagev1.StorageClass {
	params := map[string]string{"bucketName": inlineBucket(config), "pathPrefix": "claims", "mountOptions": sharedWriterOptions}
	return storageframework.GetStorageClass(DriverName, params, nil, config.Framework.Namespace.Name)
}

// GetCSIDriverName returns the name the driver is registered under.
func (d *Driver) GetCSIDriverName(*storageframework.PerTestConfig) string { return DriverName }

// bucketVolume is a pre-provisioned volume: a bucket of its own.
type bucketVolume struct {
	d      *Driver
	bucket string
}

// DeleteVolume deletes the bucket and its objects.
func (v *bucketVolume) DeleteVolume(ctx context.Context) {
	framework.ExpectNoError(v.d.deleteBucket(ctx, v.bucket), "delete bucket %s", v.bucket)
}

// CreateVolume makes a bucket of its own for a pre-provisioned PV.
func (d *Driver) CreateVolume(ctx context.Context, config *storageframework.PerTestConfig, volType storageframework.TestVolType) storageframework.TestVolume {
	if volType != storageframework.PreprovisionedPV {
		framework.Failf("%s: CreateVolume of volume type %s", DriverName, volType)
	}
	bucket := bucketName(fmt.Sprintf("pv%d-", d.volumes.Add(1)), config.Framework.Namespace.Name)
	framework.ExpectNoError(d.createBucket(ctx, bucket), "bucket %s in the emulator", bucket)
	return &bucketVolume{d: d, bucket: bucket}
}

// sharedWriterOptions are the mount options of every pre-provisioned PV and provisioned
// class: what the
// documentation tells users to set on a bucket that pods write and read at once. Each pod
// runs its own gcsfuse, which caches an object's metadata for 60 s by default; the suites'
// multi-pod tests (multiVolume's "single volume from pods on the same node") expect a
// shared disk's coherence, a file one pod overwrote read at once by the next. Inline
// volumes keep the defaults, so both are exercised.
const sharedWriterOptions = "metadata-cache:ttl-secs:0"

// GetPersistentVolumeSource returns the CSI source of a PV whose volume handle is the bucket
// (the node plugin's fallback when the attributes name none), with sharedWriterOptions.
func (d *Driver) GetPersistentVolumeSource(readOnly bool, _ string, vol storageframework.TestVolume) (*v1.PersistentVolumeSource, *v1.VolumeNodeAffinity) {
	bv, ok := vol.(*bucketVolume)
	if !ok {
		framework.Failf("%s: volume %T is not one of this driver's", DriverName, vol)
	}
	return &v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: DriverName, VolumeHandle: bv.bucket, ReadOnly: readOnly,
		VolumeAttributes: map[string]string{"mountOptions": sharedWriterOptions}}}, nil
}

// createBucket makes bucket in the emulator; one already there is fine.
func (d *Driver) createBucket(ctx context.Context, bucket string) error {
	body, _ := json.Marshal(map[string]string{"name": bucket})
	code, msg, err := d.call(ctx, http.MethodPost, "/storage/v1/b?project=conformance", body)
	if err != nil {
		return err
	}
	if code != http.StatusOK && code != http.StatusConflict {
		return fmt.Errorf("create bucket %s: HTTP %d: %s", bucket, code, msg)
	}
	return nil
}

// deleteBucket deletes bucket's objects, then the bucket; one already gone is fine.
func (d *Driver) deleteBucket(ctx context.Context, bucket string) error {
	for range 100 { // pages of objects; a test writes far fewer than 100 pages
		code, body, err := d.call(ctx, http.MethodGet, "/storage/v1/b/"+url.PathEscape(bucket)+"/o?maxResults=1000", nil)
		if err != nil {
			return err
		}
		if code == http.StatusNotFound {
			return nil
		}
		var list struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
			return fmt.Errorf("list bucket %s: HTTP %d: %s", bucket, code, body)
		}
		if len(list.Items) == 0 {
			break
		}
		for _, o := range list.Items {
			code, body, err := d.call(ctx, http.MethodDelete, "/storage/v1/b/"+url.PathEscape(bucket)+"/o/"+url.PathEscape(o.Name), nil)
			if err != nil {
				return err
			}
			if code != http.StatusNoContent && code != http.StatusOK && code != http.StatusNotFound {
				return fmt.Errorf("delete object %s/%s: HTTP %d: %s", bucket, o.Name, code, body)
			}
		}
	}
	code, body, err := d.call(ctx, http.MethodDelete, "/storage/v1/b/"+url.PathEscape(bucket), nil)
	if err != nil {
		return err
	}
	if code != http.StatusNoContent && code != http.StatusOK && code != http.StatusNotFound {
		return fmt.Errorf("delete bucket %s: HTTP %d: %s", bucket, code, body)
	}
	return nil
}

// call makes one request to the emulator's JSON API and returns the status and body.
func (d *Driver) call(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.Emulator+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}
