package csidriver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmounter"
)

// fakeMounter records what the Node service asks of a mounter; nothing is mounted.
type fakeMounter struct {
	name string
	mu   sync.Mutex
	// calls are "<name> <method> <target>", in order.
	calls                              []string
	admitErr, publishErr, unpublishErr error
	refreshErr                         error
	owned                              map[string]bool
	// gate, when set, holds publish until it is closed; entered is closed when publish is
	// entered.
	gate, entered chan struct{}
	fresh         credentials.Written
	// flags are the gcsfuse flags of the last publish.
	flags []string
}

func newFake(name string) *fakeMounter { return &fakeMounter{name: name, owned: map[string]bool{}} }

func (f *fakeMounter) record(method, target string) {
	f.mu.Lock()
	f.calls = append(f.calls, f.name+" "+method+" "+target)
	f.mu.Unlock()
}

func (f *fakeMounter) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeMounter) Mode() string                    { return f.name }
func (f *fakeMounter) Admit(*nodevolume.Request) error { f.record("admit", ""); return f.admitErr }
func (f *fakeMounter) NeedsSidecar() bool              { return f.name == "sidecar" }

func (f *fakeMounter) Publish(ctx context.Context, req *csi.NodePublishVolumeRequest, r *nodevolume.Request, log *slog.Logger) error {
	f.record("publish", req.GetTargetPath())
	f.mu.Lock()
	f.flags = slices.Clone(r.Volume.Flags)
	f.mu.Unlock()
	if f.entered != nil {
		close(f.entered)
	}
	if f.gate != nil {
		<-f.gate
	}
	if f.publishErr == nil {
		f.mu.Lock()
		f.owned[req.GetTargetPath()] = true
		f.mu.Unlock()
	}
	return f.publishErr
}

func (f *fakeMounter) Refresh(_ context.Context, req *csi.NodePublishVolumeRequest, r *nodevolume.Request) (credentials.Written, error) {
	f.record("refresh", req.GetTargetPath())
	return f.fresh, f.refreshErr
}

func (f *fakeMounter) Owns(target string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owned[target]
}

func (f *fakeMounter) Unpublish(_ context.Context, target string, _ *slog.Logger) error {
	f.record("unpublish", target)
	if f.unpublishErr == nil {
		f.mu.Lock()
		delete(f.owned, target)
		f.mu.Unlock()
	}
	return f.unpublishErr
}

// mounted is a fake mount table: what lookup answers.
type mounted struct {
	mu sync.Mutex
	at map[string]*fusemount.Info
	// err, when set, is every lookup's answer (mountinfo unreadable).
	err error
}

func (m *mounted) lookup(path string) (*fusemount.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	return m.at[path], nil
}

func (m *mounted) set(path string, info *fusemount.Info) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if info == nil {
		delete(m.at, path)
		return
	}
	m.at[path] = info
}

// fakeServer is a Node service over fake sidecar and shared mounters (shared nil: the node
// has no shared mode) and a fake mount table. No root, no kernel.
func fakeServer(t *testing.T, withShared bool) (*NodeServer, *fakeMounter, *fakeMounter, *mounted) {
	t.Helper()
	s := mustNodeServer(Config{NodeID: "n1", KubeletRoot: root, SidecarUID: 65534, SidecarGID: 65534},
		nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	side, shared := newFake("sidecar"), newFake("shared")
	m := &mounted{at: map[string]*fusemount.Info{}}
	s.sidecarMounter, s.lookup = side, m.lookup
	s.sharedMounter = nil
	if withShared {
		s.sharedMounter = shared
	}
	return s, side, shared, m
}

func publishReq(volumeID, bucket string, shared bool) *csi.NodePublishVolumeRequest {
	ctx := map[string]string{contract.AttrBucketName: bucket, contract.CtxEphemeral: "true", contract.CtxPodUID: "uid-1",
		contract.CtxPodName: "p", contract.CtxPodNamespace: "ns"}
	if shared {
		ctx[contract.AttrMountMode] = contract.MountModeShared
	}
	return &csi.NodePublishVolumeRequest{VolumeId: volumeID, TargetPath: target,
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), VolumeContext: ctx}
}

var gcsfuseMount = &fusemount.Info{FSType: fusemount.FSType, Source: "bkt"}

// A new publish goes to its mode's mounter once; a repeat of it (the kubelet's retry after
// a timeout, or its republish every minute) refreshes the credentials and mounts nothing;
// the same target for another volume, other options or the other mode is AlreadyExists.
func TestPublishThroughTheMounter(t *testing.T) {
	ctx := context.Background()
	s, side, shared, m := fakeServer(t, true)
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); err != nil {
		t.Fatal(err)
	}
	m.set(target, gcsfuseMount)
	for range 3 {
		if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); err != nil {
			t.Fatalf("a repeated publish: %v", err)
		}
	}
	if got, want := side.called(), []string{"sidecar admit ", "sidecar publish " + target,
		"sidecar refresh " + target, "sidecar refresh " + target, "sidecar refresh " + target}; !slices.Equal(got, want) {
		t.Errorf("sidecar mounter calls %q, want %q", got, want)
	}
	readOnly := publishReq("v1", "bkt", false)
	readOnly.Readonly = true
	for name, req := range map[string]*csi.NodePublishVolumeRequest{
		"read-only":         readOnly,
		"another volume ID": publishReq("v2", "bkt", false),
		"another bucket":    publishReq("v1", "other", false),
		"the shared mode":   publishReq("v1", "bkt", true),
	} {
		if _, err := s.NodePublishVolume(ctx, req); status.Code(err) != codes.AlreadyExists {
			t.Errorf("%s on the published target: %v, want AlreadyExists", name, err)
		}
	}
	if len(shared.called()) != 0 {
		t.Errorf("the shared mounter was asked %q", shared.called())
	}
	if n := s.PublishedVolumes(); n != 1 {
		t.Errorf("%d publications recorded, want 1", n)
	}
}

// On a node without the shared mode, a republish of a sidecar target that now asks for the
// shared mode is another volume (it wants a mounter this node lacks): AlreadyExists, and the
// sidecar's credentials are not refreshed for it.
func TestRepublishInAModeTheNodeLacks(t *testing.T) {
	ctx := context.Background()
	s, side, _, m := fakeServer(t, false)
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); err != nil {
		t.Fatal(err)
	}
	m.set(target, gcsfuseMount)
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", true)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("the shared mode on a sidecar target of a node without it: %v, want AlreadyExists", err)
	}
	if got, want := side.called(), []string{"sidecar admit ", "sidecar publish " + target}; !slices.Equal(got, want) {
		t.Errorf("sidecar mounter calls %q, want %q (no refresh)", got, want)
	}
}

// A target mounted before this process started (no record) is compared by what the mount
// table shows (file system, bucket, read-only), and refreshed by the mounter that owns it.
func TestRepublishOfATargetFromBeforeARestart(t *testing.T) {
	ctx := context.Background()
	s, side, shared, m := fakeServer(t, true)
	m.set(target, gcsfuseMount)
	shared.owned[target] = true
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", true)); err != nil {
		t.Fatalf("republish of a shared target found at start: %v", err)
	}
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("the sidecar mode on a shared target: %v, want AlreadyExists", err)
	}
	m.set(target, &fusemount.Info{FSType: fusemount.FSType, Source: "bkt", ReadOnly: true})
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", true)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("a read-only mount republished read-write: %v, want AlreadyExists", err)
	}
	m.set(target, &fusemount.Info{FSType: fusemount.FSType, Source: "another-bucket"})
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", true)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("a mount of another bucket: %v, want AlreadyExists", err)
	}
	m.set(target, &fusemount.Info{FSType: "ext4", Source: "bkt"})
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", true)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("a target another file system mounts: %v, want AlreadyExists", err)
	}
	if got := shared.called(); !slices.Equal(got, []string{"shared refresh " + target}) || len(side.called()) != 0 {
		t.Errorf("calls: shared %q, sidecar %q", got, side.called())
	}
	// The credentials the republish could not write fail it with the mounter's code: the
	// kubelet retries, and gcsfuse must not read an expired token meanwhile unsaid.
	m.set(target, gcsfuseMount)
	shared.refreshErr = status.Error(codes.Unavailable, "cannot write the token")
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", true)); status.Code(err) != codes.Unavailable {
		t.Errorf("a republish whose credentials could not be refreshed: %v, want Unavailable", err)
	}
}

// The mounter's refusals and failures reach the kubelet with their codes; nothing is
// recorded, so the kubelet's retry publishes again.
func TestPublishFailuresKeepTheirCode(t *testing.T) {
	ctx := context.Background()
	s, side, _, m := fakeServer(t, false)
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", true)); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a shared volume on a node without the shared mode: %v, want FailedPrecondition", err)
	}
	side.admitErr = status.Error(codes.PermissionDenied, "not here")
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("refused by admit: %v", err)
	}
	side.admitErr, side.publishErr = nil, status.Error(codes.Internal, "mount failed")
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); status.Code(err) != codes.Internal {
		t.Errorf("a failed mount: %v", err)
	}
	side.publishErr = nil
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	want := []string{"sidecar admit ", "sidecar admit ", "sidecar publish " + target, "sidecar admit ", "sidecar publish " + target}
	if got := side.called(); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if _, err := s.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v1", TargetPath: "/elsewhere/mount",
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a target outside the kubelet's pods: %v, want InvalidArgument", err)
	}
	// A mount table that cannot be read says nothing of the target: Internal, and nothing
	// is mounted over what may be there.
	m.err = errors.New("mountinfo unreadable")
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), target) {
		t.Errorf("an unreadable mount table: %v, want Internal naming the target", err)
	}
	if got := side.called(); !slices.Equal(got, want) {
		t.Errorf("calls after an unreadable mount table %q, want %q", got, want)
	}
}

// While a publish of a target runs, another call on it is Aborted (the kubelet retries);
// once it ended, the next one runs.
func TestCallsOnOneTargetDoNotOverlap(t *testing.T) {
	ctx := context.Background()
	s, side, _, _ := fakeServer(t, false)
	side.gate, side.entered = make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); done <- err }()
	select {
	case <-side.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("publish never reached the mounter")
	}
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", false)); status.Code(err) != codes.Aborted {
		t.Errorf("a second publish while the first runs: %v, want Aborted", err)
	}
	if _, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: target}); status.Code(err) != codes.Aborted {
		t.Errorf("an unpublish while the publish runs: %v, want Aborted", err)
	}
	close(side.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	side.gate, side.entered = nil, nil
	if _, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: target}); err != nil {
		t.Errorf("the unpublish after it: %v", err)
	}
}

// An unpublish goes to the mounter that published the target (a target neither knows, one
// from before a restart or never published, to the sidecar's, which cleans up whatever is
// there); its failure keeps the record, so the kubelet's retry finds the volume.
func TestUnpublishThroughTheOwner(t *testing.T) {
	ctx := context.Background()
	s, side, shared, _ := fakeServer(t, true)
	unpublish := func() error {
		_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: target})
		return err
	}
	if _, err := s.NodePublishVolume(ctx, publishReq("v1", "bkt", true)); err != nil {
		t.Fatal(err)
	}
	shared.unpublishErr = status.Error(codes.Internal, "busy")
	if err := unpublish(); status.Code(err) != codes.Internal || s.PublishedVolumes() != 1 {
		t.Errorf("a failed unpublish: %v, %d records; want Internal and the record kept", err, s.PublishedVolumes())
	}
	shared.unpublishErr = nil
	if err := unpublish(); err != nil || s.PublishedVolumes() != 0 {
		t.Errorf("unpublish: %v, %d records", err, s.PublishedVolumes())
	}
	if err := unpublish(); err != nil {
		t.Errorf("a repeated unpublish: %v", err)
	}
	if got, want := shared.called(), []string{"shared admit ", "shared publish " + target, "shared unpublish " + target, "shared unpublish " + target}; !slices.Equal(got, want) {
		t.Errorf("shared mounter calls %q, want %q", got, want)
	}
	if got, want := side.called(), []string{"sidecar unpublish " + target}; !slices.Equal(got, want) {
		t.Errorf("sidecar mounter calls %q, want %q (the repeat, of a target nobody owns)", got, want)
	}
	if _, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: target}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no volume ID: %v", err)
	}
}

// A publish whose mount failed records nothing: the kubelet's retry publishes again, and
// the published-volumes gauge does not count it.
func TestFailedPublishRecordsNothing(t *testing.T) {
	s, side, _, _ := fakeServer(t, false)
	side.publishErr = status.Error(codes.Internal, "mount failed")
	if _, err := s.NodePublishVolume(context.Background(), publishReq("v1", "bkt", false)); status.Code(err) != codes.Internal {
		t.Fatalf("a failed mount: %v", err)
	}
	if n := s.PublishedVolumes(); n != 0 {
		t.Errorf("%d publications recorded after a failed mount, want 0", n)
	}
}

// The sidecar mounter's unpublish removes the volume's credential files from the pod's
// emptyDir: a token must not outlive its mount. Runs without root (nothing is mounted).
func TestSidecarUnpublishRemovesTheCredentials(t *testing.T) {
	kroot := t.TempDir()
	s := mustNodeServer(Config{NodeID: "n1", KubeletRoot: kroot, SidecarUID: os.Getuid(), SidecarGID: os.Getgid()},
		nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tmpPath := podfiles.TmpDirPath(kroot, "uid-1")
	if err := os.MkdirAll(tmpPath, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.Open(tmpPath)
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	d, err := podfiles.OpenCredentialsDir(tmp, "data", os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteToken([]byte("tok")); err != nil {
		t.Fatal(err)
	}
	d.Close()
	tgt := podfiles.CSITargetPath(kroot, "uid-1", "data") // never mounted
	if err := s.sidecar.Unpublish(context.Background(), tgt, s.log); err != nil {
		t.Fatal(err)
	}
	if vols, err := podfiles.CredentialVolumes(tmp); err != nil || len(vols) != 0 {
		t.Fatalf("credentials left after unpublish: %v, %v", vols, err)
	}
}

// A pod the pod watch knows without the driver's sidecar is refused a sidecar-mode volume
// (nothing would serve it) and given a shared one (the node's mounter serves it).
func TestOnlyTheSidecarModeNeedsTheSidecar(t *testing.T) {
	s, side, shared, _ := fakeServer(t, true)
	s.cfg.Pods = func(uid string) (*corev1.Pod, bool) {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID(uid)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}, true
	}
	if _, err := s.NodePublishVolume(context.Background(), publishReq("v1", "bkt", false)); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a sidecar-mode volume for a pod without the sidecar: %v, want FailedPrecondition", err)
	}
	if _, err := s.NodePublishVolume(context.Background(), publishReq("v1", "bkt", true)); err != nil {
		t.Errorf("a shared volume for a pod without the sidecar: %v", err)
	}
	if slices.Contains(side.called(), "sidecar publish "+target) || !slices.Contains(shared.called(), "shared publish "+target) {
		t.Errorf("calls: sidecar %q, shared %q", side.called(), shared.called())
	}
}

// What the node plugin asks of the modes at start and stop reaches the right mounter: the
// sidecar's offer records are recovered (an unusable one is reported and removed), and the
// shared mode's recovery, clean-up and metrics are its mounter's; a node without the shared
// mode answers that it has none (nothing recovered, nothing removed, no metrics).
func TestStartAndStopReachTheirMounters(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newServer := func(sharedDir string) (*NodeServer, string) {
		stateDir := t.TempDir()
		return mustNodeServer(Config{NodeID: "n1", KubeletRoot: t.TempDir(), SidecarUID: os.Getuid(), SidecarGID: os.Getgid(),
			StateDir: stateDir, SharedDir: sharedDir}, nil, log), stateDir
	}
	for _, withShared := range []bool{false, true} {
		sharedDir := ""
		if withShared {
			sharedDir = filepath.Join(t.TempDir(), "shared")
		}
		s, stateDir := newServer(sharedDir)
		bad := filepath.Join(stateDir, "bad.json")
		if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if n, err := s.RecoverOffers(context.Background()); n != 0 || err == nil || !strings.Contains(err.Error(), "bad.json") {
			t.Errorf("shared=%v: RecoverOffers with an unusable record = %d, %v; want 0 and an error naming it", withShared, n, err)
		}
		if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("shared=%v: the unusable offer record is still there: %v", withShared, err)
		}
		if n, err := s.RecoverShared(); n != 0 || err != nil {
			t.Errorf("shared=%v: RecoverShared with no mount = %d, %v", withShared, n, err)
		}
		dir, keys, users, ok := s.SharedMetrics()
		if ok != withShared {
			t.Errorf("shared=%v: SharedMetrics ok = %v", withShared, ok)
		}
		if withShared {
			if dir != sharedmounter.MounterDir(sharedDir) || keys == nil || len(keys()) != 0 || users == nil {
				t.Errorf("SharedMetrics = %q, keys %v, %v; want the mounter's directory %q, no key, a collector", dir, keys != nil, users, sharedmounter.MounterDir(sharedDir))
			}
		} else if dir != "" || keys != nil || users != nil {
			t.Errorf("SharedMetrics without the shared mode = %q, keys %v, %v", dir, keys != nil, users)
		}
		s.Close()
		if got := s.CleanUpShared(); got != withShared {
			t.Errorf("shared=%v: CleanUpShared = %v", withShared, got)
		}
		if withShared {
			if _, err := os.Stat(sharedDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the unused shared directory is still there after CleanUpShared: %v", err)
			}
		}
	}
}

// The mount is owned for the pod: its fsGroup (volume_mount_group) and the uid its
// containers run as reach the mounter as gcsfuse flags; a volume_mount_group that is not a
// group ID is InvalidArgument naming the volume, and nothing is mounted.
func TestPublishOwnsTheMountForThePod(t *testing.T) {
	ctx := context.Background()
	s, side, _, _ := fakeServer(t, false)
	uid, sidecarUID := int64(1000), int64(65534)
	s.cfg.Pods = func(string) (*corev1.Pod, bool) {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{
			// The sidecar's own user does not count: the mount is the app's.
			{Name: contract.SidecarContainerName, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/gcsfuse-data"}},
				SecurityContext: &corev1.SecurityContext{RunAsUser: &sidecarUID}},
			{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				SecurityContext: &corev1.SecurityContext{RunAsUser: &uid}},
		}}}, true
	}
	req := publishReq("v1", "bkt", false)
	req.VolumeCapability.GetMount().VolumeMountGroup = "3000"
	if _, err := s.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--gid=3000", "--uid=1000"} {
		if !slices.Contains(side.flags, f) {
			t.Errorf("flags of the mount %q lack %s", side.flags, f)
		}
	}
	if _, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	req.VolumeCapability.GetMount().VolumeMountGroup = "staff"
	before := len(side.called())
	if _, err := s.NodePublishVolume(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "volume data") {
		t.Errorf("volume_mount_group staff: %v, want InvalidArgument naming the volume", err)
	}
	if got := side.called()[before:]; slices.Contains(got, "sidecar publish "+target) {
		t.Errorf("mounted with a bad volume_mount_group: %q", got)
	}
}

// An unpublish of a target that was never published (the kubelet's retry after the
// volume went, or a restart's leftovers) is a success through the real sidecar mounter, and
// the node service logs it on the logger it was given.
func TestUnpublishOfAnAbsentTargetSucceeds(t *testing.T) {
	kroot := t.TempDir()
	var buf syncbuf.Buffer
	s := mustNodeServer(Config{NodeID: "n1", KubeletRoot: kroot, SidecarUID: os.Getuid(), SidecarGID: os.Getgid()},
		nil, slog.New(slog.NewTextHandler(&buf, nil)))
	tgt := podfiles.CSITargetPath(kroot, "uid-1", "data")
	for range 2 {
		if _, err := s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: tgt}); err != nil {
			t.Fatalf("unpublish of a target never published: %v", err)
		}
	}
	if out := buf.String(); !strings.Contains(out, "volume unpublished") || !strings.Contains(out, tgt) {
		t.Errorf("log %q does not say the target was unpublished", out)
	}
}
