package sidecarmounter

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// newTestMounter is New over cfg, with a fresh store, volume files under a temporary
// kubelet root, a short unmount wait and a silent log where cfg has none.
func newTestMounter(t *testing.T, cfg Config) *Mounter {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = nodevolume.NewStore()
	}
	if cfg.Files == nil {
		f, err := nodevolume.NewFiles(nodevolume.Files{KubeletRoot: t.TempDir(), UID: cfg.UID, GID: cfg.GID})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Files = f
	}
	if cfg.UnmountBusyWait == 0 {
		cfg.UnmountBusyWait = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// podMounter is newTestMounter with the volume files under kroot and pod uid-1's gcsfuse-tmp
// emptyDir made; target gives the kubelet's target path of the pod's volume.
func podMounter(t *testing.T, cfg Config) (m *Mounter, tmp string, target func(volume string) string) {
	t.Helper()
	kroot := t.TempDir()
	f, err := nodevolume.NewFiles(nodevolume.Files{KubeletRoot: kroot, UID: os.Getuid(), GID: os.Getgid(), CABundle: []byte("pem\n")})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Files = f
	tmp = podfiles.TmpDirPath(kroot, "uid-1")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	return newTestMounter(t, cfg), tmp, func(volume string) string {
		return filepath.Join(kroot, "pods", "uid-1", "volumes", "kubernetes.io~csi", volume, "mount")
	}
}

// testPlan is a federation plan whose token is tok.
func testPlan(tok string) *credentials.Plan {
	return &credentials.Plan{Kind: credentials.KindFederation, Identity: "ksa ns/reader", Token: []byte(tok),
		TokenExpiry: time.Now().Add(time.Hour), Config: []byte("{}\n")}
}

// New refuses each configuration the mounter cannot work with, saying what is wrong, and
// fills in a silent metrics recorder and the default log.
func TestNewRefusesBadConfigs(t *testing.T) {
	files, err := nodevolume.NewFiles(nodevolume.Files{KubeletRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	good := func() Config {
		return Config{UID: 1, GID: 2, UnmountBusyWait: time.Second, StateDir: t.TempDir(), Store: nodevolume.NewStore(), Files: files}
	}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"negative uid", func(c *Config) { c.UID = -1 }, "must not be negative"},
		{"negative gid", func(c *Config) { c.GID = -1 }, "must not be negative"},
		{"no unmount wait", func(c *Config) { c.UnmountBusyWait = 0 }, "must be positive"},
		{"negative unmount wait", func(c *Config) { c.UnmountBusyWait = -time.Second }, "must be positive"},
		{"relative state directory", func(c *Config) { c.StateDir = "offers" }, "not an absolute path"},
		{"no store", func(c *Config) { c.Store = nil }, "store and the volume files are required"},
		{"no files", func(c *Config) { c.Files = nil }, "store and the volume files are required"},
	} {
		cfg := good()
		tc.change(&cfg)
		if m, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, %v; want an error saying %q", tc.name, m, err, tc.want)
		}
	}
	for _, cfg := range []Config{good(), {UnmountBusyWait: time.Nanosecond, Store: nodevolume.NewStore(), Files: files}} {
		m, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
		if m.cfg.Metrics == nil || m.cfg.Log == nil || m.cfg.UID != cfg.UID || m.cfg.GID != cfg.GID || m.cfg.StateDir != cfg.StateDir {
			t.Errorf("New(%+v) kept %+v", cfg, m.cfg)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	spy := &statusSpy{}
	cfg := good()
	cfg.Log, cfg.Metrics = log, spy
	if m, err := New(cfg); err != nil || m.cfg.Log != log || m.cfg.Metrics != spy {
		t.Errorf("New with a log and metrics replaced them: %+v, %v", m, err)
	}
}

// The sidecar mode is named "sidecar", admits every volume, needs the pod's sidecar, and has
// whatever target the shared mode does not.
func TestSidecarModeAnswers(t *testing.T) {
	m := newTestMounter(t, Config{})
	if m.Mode() != "sidecar" || m.Admit(&nodevolume.Request{}) != nil || !m.NeedsSidecar() || !m.Owns("/any/target") {
		t.Fatalf("Mode %q, Admit %v, NeedsSidecar %v, Owns %v", m.Mode(), m.Admit(&nodevolume.Request{}), m.NeedsSidecar(), m.Owns("/any/target"))
	}
}

// A publish records everything a restarted node plugin needs to mount and offer the volume
// again: the target, the volume ID, the pod, the hand-off volume and the kernel options.
func TestOfferRecordOfAPublish(t *testing.T) {
	kb := 1024
	req := &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/data/mount"}
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	vol := handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt", ReadOnly: true, Flags: []string{"--implicit-dirs"}}
	for _, opts := range []mountopts.Volume{{Result: mountopts.Result{NoExec: true, ReadAheadKB: &kb}}, {Result: mountopts.Result{NoAtime: true}}} {
		r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Pod: pod, Volume: vol, Opts: &opts}
		want := &offerRecord{Target: req.TargetPath, VolumeID: "vol-1", PodUID: "uid-1", Pod: pod, Volume: vol,
			NoExec: opts.NoExec, NoAtime: opts.NoAtime, ReadAheadKB: opts.ReadAheadKB}
		if got := newOfferRecord(req, r); !reflect.DeepEqual(got, want) {
			t.Errorf("record = %+v, want %+v", got, want)
		}
	}
}

// A pod without the gcsfuse-tmp emptyDir (no sidecar injected) is refused with
// FailedPrecondition before anything is made: no target directory, no offer, no record.
func TestPublishWithoutTheSidecarsEmptyDir(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "offers")
	m := newTestMounter(t, Config{StateDir: stateDir})
	target := filepath.Join(t.TempDir(), "mount")
	req := &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: target}
	for _, creds := range []*credentials.Plan{testPlan("tok"), {Kind: credentials.KindADC}} {
		r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"},
			Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}, Opts: &mountopts.Volume{}, Creds: creds}
		err := m.Publish(context.Background(), req, r, m.cfg.Log)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "uid-1") {
			t.Errorf("publish (%s) for a pod without the emptyDir: %v, want FailedPrecondition naming the pod", creds.Kind, err)
		}
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target made for a refused publish: %v", err)
	}
	if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
		t.Errorf("offer record made for a refused publish: %v", err)
	}
	if m.cfg.Store.TakeOffer(target) != nil {
		t.Error("an offer kept for a refused publish")
	}
}

// A CA bundle that cannot be written fails the publish before the target is made (Internal,
// naming the volume). A target that cannot be made is Internal naming it; the volume's
// credentials are written first (they must exist before the sidecar is offered the volume).
func TestPublishCannotMakeTheTarget(t *testing.T) {
	m, tmp, target := podMounter(t, Config{StateDir: filepath.Join(t.TempDir(), "offers")})
	tp := target("data") // its parent directory is missing
	req := &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: tp}
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"},
		Volume: handoff.Volume{Version: handoff.VersionNetwork, VolumeName: "data", Bucket: "bkt", CABundle: true}, Opts: &mountopts.Volume{}, Creds: testPlan("tok")}
	blocked := filepath.Join(tmp, "credentials", "data", "ca.pem", "x") // a directory where the bundle goes
	if err := os.MkdirAll(blocked, 0o700); err != nil {
		t.Fatal(err)
	}
	err := m.Publish(context.Background(), req, r, m.cfg.Log)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "volume data (bucket bkt): write the CA bundle") {
		t.Fatalf("publish whose CA bundle cannot be written: %v, want Internal naming the volume", err)
	}
	if err := os.RemoveAll(filepath.Dir(blocked)); err != nil {
		t.Fatal(err)
	}
	err = m.Publish(context.Background(), req, r, m.cfg.Log)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "create target "+tp) {
		t.Fatalf("publish onto a target that cannot be made: %v, want Internal naming it", err)
	}
	for _, name := range []string{"token", "ca.pem"} {
		if _, err := os.Stat(filepath.Join(tmp, "credentials", "data", name)); err != nil {
			t.Errorf("the volume's %s before its mount: %v", name, err)
		}
	}
}

// A republish writes the volume's fresh token where its gcsfuse reads it, and says so.
func TestRefreshWritesTheFreshToken(t *testing.T) {
	m, tmp, _ := podMounter(t, Config{})
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Volume: handoff.Volume{Bucket: "bkt"}, Creds: testPlan("old")}
	if _, err := m.Refresh(context.Background(), nil, r); err != nil {
		t.Fatal(err)
	}
	r.Creds = testPlan("fresh")
	w, err := m.Refresh(context.Background(), nil, r)
	if err != nil || !w.Token || w.Config {
		t.Fatalf("Refresh with a fresh token = %+v, %v; want the token alone rewritten", w, err)
	}
	if b, err := os.ReadFile(filepath.Join(tmp, "credentials", "data", "token")); err != nil || string(b) != "fresh" {
		t.Fatalf("token after the refresh: %q, %v", b, err)
	}
}

// An unpublish stops the target's offer (its socket goes), unmounts and removes the target,
// its offer record and its credential files; another volume's offer, record and files stay.
func TestUnpublishStopsTheOfferAndForgetsTheTarget(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "offers")
	m, tmp, target := podMounter(t, Config{StateDir: stateDir, UID: os.Getuid(), GID: os.Getgid()})
	emptyDir, err := podpath.OpenDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer emptyDir.Close()
	offers := map[string]*handoff.Offer{}
	for _, v := range []string{"data", "logs"} {
		tp := target(v)
		if err := os.MkdirAll(tp, 0o750); err != nil {
			t.Fatal(err)
		}
		vol := handoff.Volume{Version: handoff.Version, VolumeName: v, Bucket: "bkt"}
		r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: v}, Volume: vol, Creds: testPlan("tok")}
		if _, err := m.cfg.Files.WriteCredentials(r); err != nil {
			t.Fatal(err)
		}
		if err := m.saveRecord(&offerRecord{Target: tp, VolumeID: v, PodUID: "uid-1", Volume: vol}); err != nil {
			t.Fatal(err)
		}
		dir, err := podfiles.CreateHandoffDir(emptyDir)
		if err != nil {
			t.Fatal(err)
		}
		fuse, err := os.Open(os.DevNull) // stands in for the FUSE connection: never handed off
		if err != nil {
			t.Fatal(err)
		}
		o, err := handoff.NewOffer(handoff.OfferConfig{Dir: dir, Volume: &vol, Fuse: fuse, UID: os.Getuid(), GID: os.Getgid(), Log: m.cfg.Log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = o.Stop(context.Background()) })
		offers[v] = o
		m.cfg.Store.PutOffer(tp, o)
	}
	logs := &syncbuf.Buffer{}
	if err := m.Unpublish(context.Background(), target("data"), slog.New(slog.NewTextHandler(logs, nil))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-offers["data"].Done():
	default:
		t.Error("the unpublished target's offer still runs")
	}
	if strings.Contains(logs.String(), "did not stop") {
		t.Errorf("an idle offer's stop took longer than its bound: %s", logs)
	}
	handoffDir := podfiles.At(tmp).HandoffDir()
	if _, err := os.Stat(filepath.Join(handoffDir, podfiles.HandoffSocketName("data"))); !os.IsNotExist(err) {
		t.Errorf("the unpublished volume's socket: %v", err)
	}
	if _, err := os.Stat(target("data")); !os.IsNotExist(err) {
		t.Errorf("the unpublished target: %v", err)
	}
	if _, err := os.Stat(m.recordPath(target("data"))); !os.IsNotExist(err) {
		t.Errorf("the unpublished target's offer record: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "credentials", "data")); !os.IsNotExist(err) {
		t.Errorf("the unpublished volume's credentials: %v", err)
	}
	// The other volume's are all there.
	select {
	case <-offers["logs"].Done():
		t.Error("another target's offer stopped")
	default:
	}
	for _, p := range []string{filepath.Join(handoffDir, podfiles.HandoffSocketName("logs")), target("logs"), m.recordPath(target("logs")),
		filepath.Join(tmp, "credentials", "logs", "token")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("another volume's %s: %v", p, err)
		}
	}
	if m.cfg.Store.TakeOffer(target("logs")) != offers["logs"] {
		t.Error("another target's offer left the store")
	}
	// An unpublish of a target already gone is a success.
	if err := m.Unpublish(context.Background(), target("data"), m.cfg.Log); err != nil {
		t.Errorf("a second unpublish: %v", err)
	}
}

// A target that cannot be removed fails the unpublish (Internal, naming it): the kubelet
// calls again.
func TestUnpublishOfATargetThatCannotBeRemoved(t *testing.T) {
	m, _, target := podMounter(t, Config{StateDir: filepath.Join(t.TempDir(), "offers")})
	if err := os.MkdirAll(filepath.Join(target("data"), "left"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := m.Unpublish(context.Background(), target("data"), m.cfg.Log); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), target("data")) {
		t.Fatalf("Unpublish = %v, want Internal naming the target", err)
	}
}

// TestPublishMountsForTheSidecarsUser: the FUSE mount is made for the sidecar's uid and gid
// (user_id, group_id), which the kernel lets serve and use it; a mount for another user (the
// uid given as the gid, say) fails the sidecar's gcsfuse or its pod's reads.
func TestPublishMountsForTheSidecarsUser(t *testing.T) {
	needs.RootAndFUSE(t)
	const sidecarUID, sidecarGID = 1234, 5678
	m, _, target := podMounter(t, Config{StateDir: filepath.Join(t.TempDir(), "offers"), UID: sidecarUID, GID: sidecarGID})
	tp := target("data")
	if err := os.MkdirAll(filepath.Dir(tp), 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(tp, unix.MNT_DETACH) })
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Pod: nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"},
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt", KeyFile: true},
		Opts:   &mountopts.Volume{}, Creds: testPlan("tok")}
	if err := m.Publish(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: tp}, r, m.cfg.Log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unpublish(context.Background(), tp, m.cfg.Log) })
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(tp))
	if err != nil || len(mounts) != 1 {
		t.Fatalf("mounts at the target: %+v, %v", mounts, err)
	}
	if super := strings.Split(mounts[0].VFSOptions, ","); !slices.Contains(super, "user_id=1234") || !slices.Contains(super, "group_id=5678") {
		t.Errorf("the target's mount is for %s; want user_id=%d,group_id=%d (the sidecar's)", mounts[0].VFSOptions, sidecarUID, sidecarGID)
	}
}

// A publish mounts the target with the volume's bucket and kernel options, records the
// pending offer, and offers the descriptor on the volume's socket; the sidecar that takes
// it gets the volume, the record goes, and its reports reach the metrics (with the publish
// time) and the pod's Events.
func TestPublishMountsRecordsAndOffers(t *testing.T) {
	needs.RootAndFUSE(t)
	rec := &podevents.Recorder{}
	spy := &statusSpy{}
	m, tmp, target := podMounter(t, Config{StateDir: filepath.Join(t.TempDir(), "offers"), UID: os.Getuid(), GID: os.Getgid(), Events: rec, Metrics: spy})
	tp := target("data")
	if err := os.MkdirAll(filepath.Dir(tp), 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(tp, unix.MNT_DETACH) })
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	req := &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: tp}
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Pod: pod,
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt", ReadOnly: true, Flags: []string{"--implicit-dirs"}, KeyFile: true},
		Opts:   &mountopts.Volume{Result: mountopts.Result{NoExec: true, NoAtime: true}}, Creds: testPlan("tok")}
	before := time.Now()
	if err := m.Publish(context.Background(), req, r, m.cfg.Log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unpublish(context.Background(), tp, m.cfg.Log) }) // its offer too, on a failure below
	after := time.Now()
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(tp))
	if err != nil || len(mounts) != 1 {
		t.Fatalf("mounts at the target: %+v, %v", mounts, err)
	}
	if mi := mounts[0]; mi.FSType != fusemount.FSType || mi.Source != "bkt" || !slices.Contains(strings.Split(mi.Options, ","), "ro") ||
		!slices.Contains(strings.Split(mi.Options, ","), "noexec") || !slices.Contains(strings.Split(mi.Options, ","), "noatime") {
		t.Errorf("the target's mount: %s of %s with %s; want a ro,noexec,noatime %s of bkt", mi.FSType, mi.Source, mi.Options, fusemount.FSType)
	}
	want, err := json.Marshal(newOfferRecord(req, r))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(m.recordPath(tp)); err != nil || string(b) != string(want) {
		t.Errorf("the pending offer's record: %s, %v; want %s", b, err, want)
	}
	if b, err := os.ReadFile(filepath.Join(tmp, "credentials", "data", "token")); err != nil || string(b) != "tok" {
		t.Errorf("the volume's token: %q, %v", b, err)
	}

	offer := m.cfg.Store.TakeOffer(tp)
	if offer == nil {
		t.Fatal("the offer is not kept for the target's unpublish")
	}
	m.cfg.Store.PutOffer(tp, offer)

	// The sidecar takes the descriptor.
	handoffDir, err := podpath.OpenDir(podfiles.At(tmp).HandoffDir())
	if err != nil {
		t.Fatal(err)
	}
	defer handoffDir.Close()
	sock := podpath.ProcPath(handoffDir, podfiles.HandoffSocketName("data")) // the temporary path is too long for a socket's
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatalf("the offer's socket: %v", err)
	}
	defer conn.Close()
	vol, fuse, err := handoff.RecvVolume(conn)
	if err != nil {
		t.Fatal(err)
	}
	fuse.Close() // no gcsfuse here: the mount goes dead, as at a sidecar's crash
	if !reflect.DeepEqual(vol, &r.Volume) {
		t.Errorf("the sidecar got %+v, want %+v", vol, r.Volume)
	}
	waitfor.Until(t, 5*time.Second, "the taken offer's record to go", func() bool {
		_, err := os.Stat(m.recordPath(tp))
		return os.IsNotExist(err)
	})
	if err := handoff.SendStatus(conn, &handoff.Status{State: handoff.StateStarted, ElapsedMillis: 7}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 5*time.Second, "the GcsfuseStarted Event", func() bool { return rec.Count(contract.EventGcsfuseStarted) == 1 })
	if e := rec.Events()[0]; e.Pod != pod || e.Msg != "volume data: gcsfuse serving after 7 ms" {
		t.Errorf("event = %+v", e)
	}
	spy.mu.Lock()
	if len(spy.states) != 1 || spy.states[0] != handoff.StateStarted || spy.publishedAt[0].Before(before) || spy.publishedAt[0].After(after) {
		t.Errorf("metrics got %q at %v, want started published between %v and %v", spy.states, spy.publishedAt, before, after)
	}
	spy.mu.Unlock()

	if err := m.Unpublish(context.Background(), tp, m.cfg.Log); err != nil {
		t.Fatal(err)
	}
	select {
	case <-offer.Done():
	default:
		t.Error("the offer still relays the sidecar's reports after the unpublish")
	}
	if info, err := fusemount.Lookup(tp); err != nil || info != nil {
		t.Errorf("the target after the unpublish: %+v, %v", info, err)
	}
}

// A pod whose hand-off directory cannot be made fails the publish (Internal) before the
// target is made.
func TestPublishWithoutAHandoffDirectory(t *testing.T) {
	m, tmp, target := podMounter(t, Config{StateDir: filepath.Join(t.TempDir(), "offers")})
	if err := os.WriteFile(filepath.Join(tmp, "handoff"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tp := target("data")
	if err := os.MkdirAll(filepath.Dir(tp), 0o750); err != nil {
		t.Fatal(err)
	}
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"},
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}, Opts: &mountopts.Volume{}, Creds: &credentials.Plan{Kind: credentials.KindADC}}
	err := m.Publish(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: tp}, r, m.cfg.Log)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "hand-off directory") {
		t.Fatalf("publish = %v, want Internal about the hand-off directory", err)
	}
	if _, err := os.Stat(tp); !os.IsNotExist(err) {
		t.Errorf("target made: %v", err)
	}
}

// A descriptor that cannot be offered (here the socket's name is taken by a directory)
// fails the publish naming the volume, and undoes it: the mount, the record and the offer
// are gone.
func TestPublishThatCannotOfferUndoesTheMount(t *testing.T) {
	needs.RootAndFUSE(t)
	m, tmp, target := podMounter(t, Config{StateDir: filepath.Join(t.TempDir(), "offers"), UID: os.Getuid(), GID: os.Getgid()})
	if err := os.MkdirAll(filepath.Join(tmp, "handoff", podfiles.HandoffSocketName("data"), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	tp := target("data")
	if err := os.MkdirAll(filepath.Dir(tp), 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(tp, unix.MNT_DETACH) })
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"},
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}, Opts: &mountopts.Volume{}, Creds: &credentials.Plan{Kind: credentials.KindADC}}
	err := m.Publish(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: tp}, r, m.cfg.Log)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "volume data: offer descriptor to sidecar") {
		t.Fatalf("publish = %v, want Internal naming the volume's offer", err)
	}
	if info, err := fusemount.Lookup(tp); err != nil || info != nil {
		t.Errorf("the target's mount after the failed offer: %+v, %v", info, err)
	}
	if _, err := os.Stat(m.recordPath(tp)); !os.IsNotExist(err) {
		t.Errorf("the failed offer's record: %v", err)
	}
	if m.cfg.Store.TakeOffer(tp) != nil {
		t.Error("the failed offer is kept")
	}
}
