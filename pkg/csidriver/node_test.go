package csidriver

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

const root = "/var/lib/kubelet"

var target = podfiles.CSITargetPath(root, "uid-1", "data")

func mountCap(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// mustNodeServer is NewNodeServer for a configuration the test knows to be valid.
func mustNodeServer(cfg Config, events EventSink, log *slog.Logger) *NodeServer {
	s, err := NewNodeServer(cfg, events, log)
	if err != nil {
		panic(err)
	}
	return s
}

func newTestServer() *NodeServer {
	return mustNodeServer(Config{NodeID: "n1", KubeletRoot: root, SidecarUID: 65534, SidecarGID: 65534, GCSEndpoint: "http://emu/storage/v1/"},
		nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// Every malformed request is refused before anything is mounted, with InvalidArgument and
// a message that names the bad field.
func TestValidatePublish(t *testing.T) {
	rw := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	inline := map[string]string{contract.AttrBucketName: "bkt", contract.CtxEphemeral: "true", contract.CtxPodUID: "uid-1",
		contract.CtxPodNamespace: "ns", contract.CtxPodName: "p"}
	tests := []struct {
		name    string
		req     *csi.NodePublishVolumeRequest
		wantErr string
		check   func(t *testing.T, r *nodevolume.Request)
	}{
		{name: "inline ok", req: &csi.NodePublishVolumeRequest{VolumeId: "csi-abc", TargetPath: target, VolumeCapability: mountCap(rw), VolumeContext: inline},
			check: func(t *testing.T, r *nodevolume.Request) {
				if r.Volume.Bucket != "bkt" || r.Volume.VolumeName != "data" || r.Volume.Endpoint != "http://emu/storage/v1/" || r.Volume.ReadOnly {
					t.Fatalf("volume = %+v", r.Volume)
				}
				if want := (PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}); r.Pod != want {
					t.Fatalf("pod = %+v, want %+v", r.Pod, want)
				}
			}},
		{name: "pv handle is bucket", req: &csi.NodePublishVolumeRequest{VolumeId: "pv-bucket", TargetPath: target, VolumeCapability: mountCap(rw, "implicit-dirs")},
			check: func(t *testing.T, r *nodevolume.Request) {
				if r.Volume.Bucket != "pv-bucket" || len(r.Volume.Flags) != 1 {
					t.Fatalf("volume = %+v", r.Volume)
				}
				if r.Pod.UID != "uid-1" {
					t.Fatalf("pod UID %q, want the target's (no pod info in the volume context)", r.Pod.UID)
				}
			}},
		{name: "pv handle bucket:suffix", req: &csi.NodePublishVolumeRequest{VolumeId: "pv-bucket:second", TargetPath: target, VolumeCapability: mountCap(rw)},
			check: func(t *testing.T, r *nodevolume.Request) {
				if r.Volume.Bucket != "pv-bucket" {
					t.Fatalf("bucket = %q, want pv-bucket (the handle before its first ':')", r.Volume.Bucket)
				}
			}},
		{name: "pv handle with a bad suffix", req: &csi.NodePublishVolumeRequest{VolumeId: "pv-bucket:a/b", TargetPath: target, VolumeCapability: mountCap(rw)},
			wantErr: `volume handle "pv-bucket:a/b": the part after the first ':' ("a/b")`},
		{name: "pv handle all buckets", req: &csi.NodePublishVolumeRequest{VolumeId: "_", TargetPath: target, VolumeCapability: mountCap(rw)},
			wantErr: `bucket name "_" (gcsfuse's all-buckets mode) is not supported`},
		{name: "reader-only access is read-only", req: &csi.NodePublishVolumeRequest{VolumeId: "b-1", TargetPath: target, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)},
			check: func(t *testing.T, r *nodevolume.Request) {
				if !r.Volume.ReadOnly {
					t.Fatal("not read-only")
				}
			}},
		{name: "readonly request", req: &csi.NodePublishVolumeRequest{VolumeId: "b-1", TargetPath: target, VolumeCapability: mountCap(rw), Readonly: true},
			check: func(t *testing.T, r *nodevolume.Request) {
				if !r.Volume.ReadOnly {
					t.Fatal("not read-only")
				}
			}},
		{name: "ro mount option", req: &csi.NodePublishVolumeRequest{VolumeId: "b-1", TargetPath: target, VolumeCapability: mountCap(rw, "ro")},
			check: func(t *testing.T, r *nodevolume.Request) {
				if !r.Volume.ReadOnly {
					t.Fatal("not read-only")
				}
			}},
		{name: "no volume id", req: &csi.NodePublishVolumeRequest{TargetPath: target, VolumeCapability: mountCap(rw)}, wantErr: "volume_id"},
		{name: "no target", req: &csi.NodePublishVolumeRequest{VolumeId: "b", VolumeCapability: mountCap(rw)}, wantErr: "target_path"},
		{name: "no capability", req: &csi.NodePublishVolumeRequest{VolumeId: "b", TargetPath: target}, wantErr: "volume_capability"},
		{name: "block", req: &csi.NodePublishVolumeRequest{VolumeId: "b", TargetPath: target, VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}, AccessMode: &csi.VolumeCapability_AccessMode{Mode: rw}}}, wantErr: "block"},
		{name: "fs type", req: &csi.NodePublishVolumeRequest{VolumeId: "b", TargetPath: target, VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}, AccessMode: &csi.VolumeCapability_AccessMode{Mode: rw}}}, wantErr: "fs_type"},
		{name: "no access type", req: &csi.NodePublishVolumeRequest{VolumeId: "b", TargetPath: target, VolumeCapability: &csi.VolumeCapability{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: rw}}}, wantErr: "mount access type"},
		{name: "unknown access mode", req: &csi.NodePublishVolumeRequest{VolumeId: "b", TargetPath: target, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_UNKNOWN)}, wantErr: "access_mode"},
		{name: "target outside kubelet", req: &csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: "/tmp/x", VolumeCapability: mountCap(rw)}, wantErr: "target_path"},
		{name: "bad volume name", req: &csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: podfiles.CSITargetPath(root, "u", "Bad_Name"), VolumeCapability: mountCap(rw)}, wantErr: "DNS-1123"},
		// A PersistentVolume's name is a DNS-1123 subdomain, and names the kubelet's volume
		// directory (Kubernetes' storage suite names its PVs "gcsfuse.csi.storage-xxxxx").
		{name: "pv named with dots", req: &csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: podfiles.CSITargetPath(root, "u", "gcsfuse.csi.storage-fkkcb"), VolumeCapability: mountCap(rw)},
			check: func(t *testing.T, r *nodevolume.Request) {
				if r.Volume.VolumeName != "gcsfuse.csi.storage-fkkcb" || r.Volume.Bucket != "bkt" {
					t.Fatalf("volume = %+v", r.Volume)
				}
			}},
		{name: "pod uid mismatch", req: &csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: target, VolumeCapability: mountCap(rw),
			VolumeContext: map[string]string{contract.CtxPodUID: "other"}}, wantErr: "does not match"},
		{name: "inline without bucket", req: &csi.NodePublishVolumeRequest{VolumeId: "csi-abc", TargetPath: target, VolumeCapability: mountCap(rw),
			VolumeContext: map[string]string{contract.CtxEphemeral: "true"}}, wantErr: "bucketName"},
		{name: "disallowed option", req: &csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: target, VolumeCapability: mountCap(rw, "custom-endpoint=http://x")}, wantErr: "custom-endpoint"},
		{name: "unknown attribute", req: &csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: target, VolumeCapability: mountCap(rw),
			VolumeContext: map[string]string{"bucket": "x"}}, wantErr: `"bucket"`},
	}
	s := newTestServer()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := s.validatePublish(tt.req)
			if tt.wantErr != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want InvalidArgument containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
}

func TestUnpublishValidation(t *testing.T) {
	s := newTestServer()
	for _, req := range []*csi.NodeUnpublishVolumeRequest{{TargetPath: target}, {VolumeId: "v"}} {
		if _, err := s.NodeUnpublishVolume(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("NodeUnpublishVolume(%v) = %v, want InvalidArgument", req, err)
		}
	}
}

func TestConcurrentOperationIsAborted(t *testing.T) {
	s := newTestServer()
	unlock, err := s.lock(target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.lock(target); status.Code(err) != codes.Aborted {
		t.Fatalf("second lock = %v, want Aborted", err)
	}
	unlock()
	if u, err := s.lock(target); err != nil {
		t.Fatalf("lock after unlock: %v", err)
	} else {
		u()
	}
}

func TestListen(t *testing.T) {
	dir := t.TempDir()
	for _, ep := range []string{"unix://" + dir + "/a.sock", dir + "/b.sock"} {
		ln, err := Listen(ep)
		if err != nil {
			t.Fatalf("Listen(%q): %v", ep, err)
		}
		ln.Close()
	}
	if _, err := Listen("tcp://127.0.0.1:5000"); err == nil {
		t.Fatal("tcp endpoint accepted")
	}
	// A stale socket (or anything) left at the path by a previous run is replaced.
	stale := filepath.Join(dir, "stale.sock")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("unix://" + stale)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln.Close()
	// unix://csi.sock names a path relative to the working directory (host and path).
	t.Chdir(dir)
	if err := os.Mkdir("sub", 0o755); err != nil {
		t.Fatal(err)
	}
	if ln, err = Listen("unix://sub/c.sock"); err != nil {
		t.Fatalf("Listen(unix://sub/c.sock): %v", err)
	}
	defer ln.Close()
	if fi, err := os.Stat(filepath.Join(dir, "sub", "c.sock")); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("no socket at sub/c.sock: %v", err)
	}
}

// An identical second NodePublishVolume of a published target must succeed (CSI
// idempotency). Republish compares the validated volumes with reflect.DeepEqual, so this
// drives validatePublish and republish, the code after the mount check, with a request
// carrying both mountOptions and fileCacheCapacity: their flags once came out in map order,
// and about every other repeat was refused with AlreadyExists. The mount itself needs root
// and a kubelet tree, so the publication is recorded as mountAndOffer would record it.
func TestRepublishIdenticalRequestSucceeds(t *testing.T) {
	const repeats = 100
	rw := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	req := &csi.NodePublishVolumeRequest{VolumeId: "csi-abc", TargetPath: target, VolumeCapability: mountCap(rw, "gid=3"),
		VolumeContext: map[string]string{
			contract.AttrBucketName: "bkt", contract.AttrMountOptions: "implicit-dirs,uid=1001", contract.AttrFileCacheCapacity: "1Gi",
			contract.CtxEphemeral: "true", contract.CtxPodUID: "uid-1", contract.CtxPodName: "p", contract.CtxPodNamespace: "ns",
		}}
	s := newTestServer()
	first, err := s.validatePublish(req)
	if err != nil {
		t.Fatal(err)
	}
	s.store.Remember(target, nodevolume.Publication{VolumeID: req.GetVolumeId(), Volume: first.Volume})
	for i := 0; i < repeats; i++ {
		again, err := s.validatePublish(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.republish(context.Background(), req, again, &fusemount.Info{}, s.log); err != nil {
			t.Fatalf("repeat %d of an identical publish: %v (flags %q, published %q)", i, err, again.Volume.Flags, first.Volume.Flags)
		}
	}
}

// A configuration that cannot work fails at start, naming what is wrong.
func TestNewNodeServerValidates(t *testing.T) {
	good := Config{NodeID: "n1", KubeletRoot: "/var/lib/kubelet", SidecarUID: 65534, SidecarGID: 65534}
	if _, err := NewNodeServer(good, nil, nil); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tt := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.NodeID = "" }, "node ID"},
		{func(c *Config) { c.KubeletRoot = "var/lib/kubelet" }, "kubelet root"},
		{func(c *Config) { c.SidecarUID = -1 }, "uid"},
		{func(c *Config) { c.SidecarGID = -1 }, "gid"},
		{func(c *Config) { c.UnmountBusyWait = -time.Nanosecond }, "busy wait"},
		{func(c *Config) { c.StateDir = "offers" }, "state directory"},
		{func(c *Config) { c.SharedDir = "shared" }, "shared directory"},
		{func(c *Config) { c.SharedLinger = -1 }, "shared linger"},
		{func(c *Config) { c.SharedOfferWait = -1 }, "shared offer wait"},
		{func(c *Config) { c.Credentials.Provider = "not-a-provider" }, "credentials"},
		{func(c *Config) { c.GCSEndpoint = "emulator:8080" }, "GCS endpoint"},
		{func(c *Config) { c.GCSEndpoint = "ftp://emu/storage/v1/" }, "GCS endpoint"},
		{func(c *Config) { c.GCSEndpoint = "http:///storage/v1/" }, "GCS endpoint"},
		{func(c *Config) { c.MachineType = "n2 standard" }, "machine type"},
		{func(c *Config) { c.MachineType = "n2,implicit-dirs" }, "machine type"},
	} {
		cfg := good
		tt.mutate(&cfg)
		if _, err := NewNodeServer(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewNodeServer(%+v) error = %v, want one naming %q", cfg, err, tt.want)
		}
		// Validate alone refuses it too: the node plugin calls it before building anything.
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", cfg, err, tt.want)
		}
	}
}

// A republish may carry a rotated key (another identity wording) but not another kind of
// credentials: the running gcsfuse cannot change how it authenticates.
func TestSameVolumeIgnoresOnlyTheIdentityWording(t *testing.T) {
	a := handoff.Volume{VolumeName: "data", Bucket: "b", KeyFile: true, Identity: "service account x (key 1)"}
	b := a
	b.Identity = "service account x (key 2)"
	if !sameVolume(a, b) {
		t.Error("a rotated key made the volume differ")
	}
	b.KeyFile = false
	if sameVolume(a, b) {
		t.Error("a volume that lost its key file is the same volume")
	}
}

// A shared volume is published under its mount's name, and its republish carries the pod's
// volume name (the target path fixes it anyway): the same volume, not AlreadyExists every
// minute.
func TestSameVolumeIgnoresTheName(t *testing.T) {
	published := handoff.Volume{VolumeName: "shared-0123456789abcdef01234567-1796531054820", Bucket: "b", Flags: []string{"--implicit-dirs"}}
	again := published
	again.VolumeName = "data"
	if !sameVolume(published, again) {
		t.Error("a republished shared volume differs by its name")
	}
	again.Bucket = "c"
	if sameVolume(published, again) {
		t.Error("another bucket is the same volume")
	}
}

// Credential problems are refused at validation with a code that says whose fault it is:
// the volume's (InvalidArgument) or the cluster's setup (FailedPrecondition: no token).
func TestValidatePublishCredentialCodes(t *testing.T) {
	s := newTestServer()
	base := func() *csi.NodePublishVolumeRequest {
		return &csi.NodePublishVolumeRequest{VolumeId: "csi-abc", TargetPath: target,
			VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER),
			VolumeContext: map[string]string{contract.AttrBucketName: "bkt", contract.CtxEphemeral: "true", contract.CtxPodUID: "uid-1",
				contract.AttrWorkloadIdentityProvider: "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov"}}
	}
	if _, err := s.validatePublish(base()); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "tokenRequests") {
		t.Errorf("no token: %v", err)
	}
	req := base()
	req.VolumeContext[contract.AttrServiceAccount] = "not-an-email"
	if _, err := s.validatePublish(req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad service account: %v", err)
	}
	req = base()
	req.VolumeContext[contract.CtxSATokens] = `{"gcsfuse.csi.storage":{"token":"a.b.c","expirationTimestamp":"2030-01-01T00:00:00Z"}}`
	r, err := s.validatePublish(req)
	if err != nil || !r.Volume.KeyFile || !strings.Contains(r.Volume.Identity, "through //iam.googleapis.com") {
		t.Fatalf("federation: %+v %v", r, err)
	}
	// The configuration points gcsfuse at the volume's token file where the pod's sidecar
	// sees its emptyDir.
	s.cfg.SidecarTmpPath = func(uid string) string { return "/sidecar-tmp-of-" + uid }
	if r, err = s.validatePublish(req); err != nil {
		t.Fatal(err)
	}
	if want := podfiles.At("/sidecar-tmp-of-uid-1").CredentialsTokenFile("data"); !strings.Contains(string(r.Creds.Config), `"`+want+`"`) {
		t.Errorf("external_account configuration %s does not name the token file %s", r.Creds.Config, want)
	}
	// The kubelet's keys stay accepted, the credential attributes too; others are refused.
	req.VolumeContext["serviceAcount"] = "typo"
	if _, err := s.validatePublish(req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"serviceAcount"`) {
		t.Errorf("misspelt attribute: %v", err)
	}
}

// The kubelet passes the pod's fsGroup only to a driver that advertises VOLUME_MOUNT_GROUP.
func TestNodeAdvertisesVolumeMountGroup(t *testing.T) {
	resp, err := newTestServer().NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.GetCapabilities() {
		if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP {
			return
		}
	}
	t.Fatalf("capabilities %v lack VOLUME_MOUNT_GROUP", resp.GetCapabilities())
}

// The ownership flags come from a pod the first publish may not have known: a republish
// without them is the same volume.
func TestSameVolumeIgnoresOwnership(t *testing.T) {
	a := handoff.Volume{VolumeName: "data", Bucket: "b", Flags: []string{"--implicit-dirs", "--uid=1000", "--gid=5", "--file-mode=664", "--dir-mode=775"}}
	b := a
	b.Flags = []string{"--implicit-dirs"}
	if !sameVolume(a, b) {
		t.Error("ownership flags made the volume differ")
	}
	b.Flags = nil
	if sameVolume(a, b) {
		t.Error("a volume without --implicit-dirs is the same volume")
	}
}

// A shared volume that would read with Application Default Credentials, which are the
// mounter's, is refused with PermissionDenied outside the namespaces a cluster admin named,
// before anything is mounted; inside them, with a key, with the volume's own provider or
// with the shared provider, it goes on; a sidecar volume is never concerned. A namespace in
// the volume context that is not the pod's (as the pod watcher knows it) is refused too.
func TestSharedADCOnlyWhereAllowed(t *testing.T) {
	const provider = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov"
	token := `{"gcsfuse.csi.storage":{"token":"a.b.c","expirationTimestamp":"2030-01-01T00:00:00Z"}}`
	req := func(ns string, extra map[string]string) *csi.NodePublishVolumeRequest {
		ctx := map[string]string{contract.AttrBucketName: "bkt", contract.CtxEphemeral: "true", contract.CtxPodUID: "uid-1",
			contract.CtxPodNamespace: ns, contract.CtxPodName: "p", contract.AttrMountMode: contract.MountModeShared, contract.CtxSATokens: token}
		maps.Copy(ctx, extra)
		return &csi.NodePublishVolumeRequest{VolumeId: "csi-abc", TargetPath: target,
			VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), VolumeContext: ctx}
	}
	server := func(adc string, sharedProvider string) *NodeServer {
		a, err := credentials.ParseSharedADC(adc)
		if err != nil {
			t.Fatal(err)
		}
		return mustNodeServer(Config{NodeID: "n1", KubeletRoot: root, SidecarUID: os.Getuid(), SidecarGID: os.Getgid(), SharedADC: a, SharedDir: t.TempDir(),
			Credentials: credentials.Config{SharedProvider: sharedProvider},
			Pods: func(uid string) (*corev1.Pod, bool) {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", UID: types.UID(uid)}}, uid == "uid-2"
			}}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	// validatePublish, then the check a new publish makes (NodePublishVolume).
	publish := func(s *NodeServer, req *csi.NodePublishVolumeRequest) (*nodevolume.Request, error) {
		r, err := s.validatePublish(req)
		if err != nil {
			return r, err
		}
		m, err := s.mounterFor(r)
		if err == nil {
			err = m.Admit(r)
		}
		return r, err
	}
	s := server("batch,team-*", "")
	_, err := publish(s, req("default", nil))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `namespace "default"`) || !strings.Contains(err.Error(), "mounter.adcNamespaces") {
		t.Errorf("shared ADC in default: %v; want PermissionDenied naming the namespace and the chart value", err)
	}
	if _, err := s.validatePublish(req("default", nil)); err != nil {
		t.Errorf("validatePublish, which a republish runs too, refused: %v (a running pod's republish must not be)", err)
	}
	if r, err := publish(s, req("team-a", nil)); err != nil || r.Creds.Kind != credentials.KindADC {
		t.Errorf("shared ADC in team-a, allowed: %v", err)
	}
	forged := req("batch", nil) // uid-2 is in team-a as the pod watcher knows it
	forged.TargetPath = podfiles.CSITargetPath(root, "uid-2", "data")
	forged.VolumeContext[contract.CtxPodUID] = "uid-2"
	if _, err := publish(s, forged); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"team-a"`) {
		t.Errorf("a volume context naming another namespace than the pod's: %v; want PermissionDenied", err)
	}
	if _, err := publish(s, req("", nil)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("shared ADC without the pod's namespace (no podInfoOnMount): %v; want PermissionDenied", err)
	}
	if r, err := publish(s, req("default", map[string]string{contract.AttrWorkloadIdentityProvider: provider})); err != nil || r.Creds.Kind != credentials.KindFederation {
		t.Errorf("shared with the volume's provider: %v", err)
	}
	sidecar := req("default", nil)
	delete(sidecar.VolumeContext, contract.AttrMountMode)
	if r, err := publish(s, sidecar); err != nil || r.Creds.Kind != credentials.KindADC {
		t.Errorf("sidecar volume with ADC: %v", err)
	}
	// The shared provider: every shared volume without an identity of its own is the pod's.
	s = server("", provider)
	if r, err := publish(s, req("default", nil)); err != nil || r.Creds.Kind != credentials.KindFederation || !strings.Contains(r.Creds.Identity, "through "+provider) {
		t.Errorf("shared volume, shared provider: %+v, %v; want the pod's token exchanged through %s", r, err, provider)
	}
	if r, err := publish(s, sidecar); err != nil || r.Creds.Kind != credentials.KindADC {
		t.Errorf("sidecar volume, shared provider only: %v; want ADC (the pod's own, in its sidecar)", err)
	}
}

// Every CSI access mode is served: the reader-only ones mount read-only, the writer ones
// read-write; an unknown one is refused at validation.
func TestAccessModes(t *testing.T) {
	s := newTestServer()
	for mode := range csi.VolumeCapability_AccessMode_Mode_name {
		m := csi.VolumeCapability_AccessMode_Mode(mode)
		r, err := s.validatePublish(&csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: target, VolumeCapability: mountCap(m)})
		switch m {
		case csi.VolumeCapability_AccessMode_UNKNOWN:
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%v: %v, want InvalidArgument", m, err)
			}
		case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
			if err != nil || !r.Volume.ReadOnly {
				t.Errorf("%v: %v, want a read-only volume", m, err)
			}
		default:
			if err != nil || r.Volume.ReadOnly {
				t.Errorf("%v: %v, want a read-write volume", m, err)
			}
		}
	}
}

// The kubelet learns the node's ID from NodeGetInfo (it names the node in the CSINode).
func TestNodeGetInfoNamesTheNode(t *testing.T) {
	resp, err := newTestServer().NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || resp.GetNodeId() != "n1" {
		t.Fatalf("NodeGetInfo = %v, %v; want node ID n1", resp, err)
	}
}
