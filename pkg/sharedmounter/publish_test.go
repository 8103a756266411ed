package sharedmounter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
)

// fakeBinds is the table's effects with Bind recorded instead of mounted (a bind mount needs
// root); Alive and Stop are the Mounter's own.
type fakeBinds struct {
	ops
	mu    sync.Mutex
	bound map[string]string // by target: the mount it was bound to
	// during, if set, runs in each Bind before it is recorded: what happens meanwhile.
	during func(mount, target string)
}

func (f *fakeBinds) Bind(mount, target string) error {
	if f.during != nil {
		f.during(mount, target)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bound[target] = mount
	return nil
}

// boundTo is the mount target was bound to ("" when none).
func (f *fakeBinds) boundTo(target string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bound[target]
}

// publishableMounter is a bareMounter that takes shared publishes without root: its
// mounter's directory made, Workload Identity Federation configured, Events recorded, binds
// faked and every mount answering a statfs at once (a serving gcsfuse). No mnt/ directory is
// made: a start of a new mount fails at once there, before anything is mounted.
func publishableMounter(t *testing.T) (*Mounter, *sharedmount.Table, *fakeBinds, *podevents.Recorder) {
	t.Helper()
	const provider = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov"
	s := bareMounter(t, t.TempDir())
	if err := os.MkdirAll(s.mounterDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	s.cfg.Credentials = credentials.Config{SharedProvider: provider}.WithDefaults().ForShared()
	rec := &podevents.Recorder{}
	s.cfg.Events = rec
	s.statfs = func(string, *unix.Statfs_t) error { return nil }
	binds := &fakeBinds{ops: ops{s}, bound: map[string]string{}}
	table, err := sharedmount.New(binds, time.Hour, s.cfg.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(table.Close)
	s.table = table
	return s, table, binds, rec
}

// podPublish is pod uid's publish of volume data (bucket b) with its Kubernetes token: every
// pod of a test has the same key.
func podPublish(t *testing.T, uid string) (*csi.NodePublishVolumeRequest, *nodevolume.Request) {
	req := &csi.NodePublishVolumeRequest{TargetPath: filepath.Join(t.TempDir(), "target-"+uid), VolumeContext: map[string]string{
		contract.AttrBucketName: "b", contract.AttrMountMode: contract.MountModeShared,
		contract.CtxSATokens: `{"gcsfuse.csi.storage":{"token":"a.b.` + uid + `","expirationTimestamp":"2030-01-01T00:00:00Z"}}`}}
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: uid, VolumeName: "data"}, Pod: nodevolume.PodRef{Namespace: "ns", Name: "p-" + uid, UID: uid},
		Opts: &mountopts.Volume{Bucket: "b", Shared: true}, Volume: handoff.Volume{Version: handoff.Version, Bucket: "b"},
		Creds: &credentials.Plan{Kind: credentials.KindFederation, Identity: "Kubernetes service account ns/reader"}}
	return req, r
}

// runningMount gives the table the key's mount, bound by the first pod's target (restored:
// starting one needs a FUSE mount), and returns its name.
func runningMount(table *sharedmount.Table, req *csi.NodePublishVolumeRequest, r *nodevolume.Request) string {
	mount := sharedmount.MountName(sharedKey(r).Name(), 1)
	table.Restore(mount, []sharedmount.User{{Target: req.TargetPath, PodNamespace: r.Pod.Namespace, PodName: r.Pod.Name, PodUID: r.Pod.UID, Volume: "data"}})
	return mount
}

// takenSilently offers mount to the node's mounter as a start does, and has a fake mounter
// take its descriptor and say nothing after: its gcsfuse still starting. Until the test ends.
// It returns the fake mounter's end of the status stream.
func takenSilently(t *testing.T, s *Mounter, mount string) *net.UnixConn {
	t.Helper()
	dir, err := podpath.OpenDir(s.mounterDir())
	if err != nil {
		t.Fatal(err)
	}
	hd, err := podfiles.CreateHandoffDir(dir)
	dir.Close()
	if err != nil {
		t.Fatal(err)
	}
	fuse, err := os.Open(os.DevNull) // the FUSE connection's stand-in: only handed over
	if err != nil {
		t.Fatal(err)
	}
	taken := make(chan struct{})
	r := &nodevolume.Request{Shared: mount, Opts: &mountopts.Volume{Bucket: "b"}, Volume: handoff.Volume{Version: handoff.Version, VolumeName: mount, Bucket: "b"}}
	if err := s.offerShared(r, hd, fuse, taken, s.cfg.Log); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: podfiles.At(s.mounterDir()).HandoffSocket(mount), Net: "unix"})
	if err == nil {
		var f *os.File
		_, f, err = handoff.RecvVolume(conn)
		if f != nil {
			f.Close()
		}
	}
	t.Cleanup(func() { // the offer first: a mounter's connection closed then is no end to report
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.stopSharedOffer(ctx, mount)
		if conn != nil {
			conn.Close()
		}
	})
	if err != nil {
		t.Fatalf("the fake mounter did not take %s: %v", mount, err)
	}
	select {
	case <-taken:
	case <-time.After(5 * time.Second):
		t.Fatal("the hand-off was not seen")
	}
	return conn
}

// A pod published while its key's mount is starting (the node's mounter took it, its gcsfuse
// has not reported yet, and the kernel holds every request to it, a statfs too, until gcsfuse
// answers its INIT) is bound to that mount: a second gcsfuse would start for the key. A mount
// silent for longer than sharedStartGrace is checked like any other, and one found dead is
// not joined.
func TestPublishJoinsAStartingMount(t *testing.T) {
	s, table, binds, _ := publishableMounter(t)
	held := make(chan struct{}) // a starting mount's statfs: answered when the test ends
	t.Cleanup(func() { close(held) })
	var dead atomic.Bool // the mount's gcsfuse died without a word: the connection aborted
	s.statfs = func(string, *unix.Statfs_t) error {
		if dead.Load() {
			return unix.ENOTCONN
		}
		<-held
		return nil
	}
	req1, r1 := podPublish(t, "uid-1")
	mount := runningMount(table, req1, r1)
	takenSilently(t, s, mount)

	req2, r2 := podPublish(t, "uid-2")
	if err := s.Publish(context.Background(), req2, r2, s.cfg.Log); err != nil {
		t.Fatalf("a pod published while its key's mount starts: %v; want it bound to %s (a second gcsfuse was started for the key)", err, mount)
	}
	if got := binds.boundTo(req2.TargetPath); got != mount {
		t.Fatalf("the second pod bound to %q, want the starting mount %s", got, mount)
	}

	// sharedStartGrace later, still no report: the mount is asked, and answers dead.
	s.mu.Lock()
	s.starting[mount] = time.Now().Add(-sharedStartGrace - time.Second)
	s.mu.Unlock()
	dead.Store(true)
	req3, r3 := podPublish(t, "uid-3")
	err := s.Publish(context.Background(), req3, r3, s.cfg.Log) // a new mount's start, which fails here (no mnt/)
	if got := binds.boundTo(req3.TargetPath); got == mount || table.NameOf(req3.TargetPath) == mount {
		t.Fatalf("a pod bound to a mount silent past the start grace and dead (publish: %v), trusted without a check", err)
	}
}

// A pod that cannot join its key's running mount (its files cannot be written: here
// something in the way of the CA bundle) fails its publish and leaves the mount's credential
// files alone: the mount's gcsfuse reads its token there for the pods bound before. Only
// a mount that never started is cleaned up after a failed publish.
func TestFailedJoinKeepsTheMountsFiles(t *testing.T) {
	s, table, binds, _ := publishableMounter(t)
	req1, r1 := podPublish(t, "uid-1")
	mount := runningMount(table, req1, r1)
	// The files the first pod's publish wrote.
	if err := s.useSharedKey(r1, mount, req1.VolumeContext, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cfg.Files.WriteCredentials(r1); err != nil {
		t.Fatal(err)
	}
	paths := podfiles.At(s.mounterDir())
	if err := os.Mkdir(paths.CABundleFile(mount), 0o700); err != nil {
		t.Fatal(err)
	}
	s.cfg.Files.CABundle = []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

	req2, r2 := podPublish(t, "uid-2")
	r2.Volume.CABundle = true
	if err := s.Publish(context.Background(), req2, r2, s.cfg.Log); err == nil || !strings.Contains(err.Error(), "CA bundle") {
		t.Fatalf("a pod whose CA bundle cannot be written: %v, want its publish failed on the CA bundle", err)
	}
	for _, f := range []string{paths.CredentialsTokenFile(mount), paths.CredentialsConfigFile(mount)} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the running mount's %s after a pod failed to join: %v; its pods' gcsfuse reads it", filepath.Base(f), err)
		}
	}
	if binds.boundTo(req2.TargetPath) != "" || table.NameOf(req1.TargetPath) != mount {
		t.Errorf("after the failed join: the pod bound to %q, the first pod's mount %q", binds.boundTo(req2.TargetPath), table.NameOf(req1.TargetPath))
	}
}

// A pod bound to its key's running mount is told so (SharedMountJoined, naming the mount);
// the pods bound before are told nothing more.
func TestJoiningPodIsToldItShares(t *testing.T) {
	s, table, binds, rec := publishableMounter(t)
	req1, r1 := podPublish(t, "uid-1")
	mount := runningMount(table, req1, r1)
	req2, r2 := podPublish(t, "uid-2")
	if err := s.Publish(context.Background(), req2, r2, s.cfg.Log); err != nil {
		t.Fatal(err)
	}
	if got := binds.boundTo(req2.TargetPath); got != mount {
		t.Fatalf("the second pod bound to %q, want %s", got, mount)
	}
	events := rec.Events()
	if len(events) != 1 || events[0].Reason != contract.EventSharedMountJoined || events[0].Pod.UID != "uid-2" || events[0].Warning {
		t.Fatalf("events %+v, want one normal %s on the joining pod uid-2", events, contract.EventSharedMountJoined)
	}
	if msg := events[0].Msg; !strings.Contains(msg, mount) || !strings.Contains(msg, "bucket b") || !strings.Contains(msg, "volume data") {
		t.Errorf("the %s message %q does not name the volume, the mount and the bucket", contract.EventSharedMountJoined, msg)
	}
	// Its credentials are remembered for the target: a republish's check and the token's
	// hand-over when another pod of the mount leaves.
	p, ok := s.cfg.Store.Plan(req2.TargetPath)
	if !ok || p.Mount != mount || p.Plan != r2.Creds || p.Plan.Kind != credentials.KindFederation {
		t.Errorf("the joining target's plan %+v (%v), want its federation plan on %s", p, ok, mount)
	}
	if p, ok := s.cfg.Store.Plan(req1.TargetPath); ok {
		t.Errorf("the first pod's target got a plan from the second's publish: %+v", p)
	}
	// Its token is the mount's now, where the mounter reads it.
	tok, err := os.ReadFile(podfiles.At(s.mounterDir()).CredentialsTokenFile(mount))
	if err != nil || string(tok) != "a.b.uid-2" {
		t.Errorf("the mount's token after the join: %q %v, want the joining pod's a.b.uid-2", tok, err)
	}
}

// A pod whose key's mount ends while it is being bound (the mounter's report comes between
// the join and the bind) is told as the pods bound before were, a Warning naming the end, and
// never that it joined a running gcsfuse.
func TestPodBoundAsItsMountEndsIsTold(t *testing.T) {
	s, table, binds, rec := publishableMounter(t)
	req1, r1 := podPublish(t, "uid-1")
	mount := runningMount(table, req1, r1)
	binds.during = func(m, _ string) {
		s.onSharedStatus(m, handoff.Volume{VolumeName: m, Bucket: "b"}, &handoff.Status{State: handoff.StateFailed, Message: "out of memory"}, s.cfg.Log)
	}
	req2, r2 := podPublish(t, "uid-2")
	if err := s.Publish(context.Background(), req2, r2, s.cfg.Log); err != nil {
		t.Fatal(err)
	}
	var told []string
	for _, e := range rec.Events() {
		if e.Reason != contract.EventGcsfuseFailed || !e.Warning || !strings.Contains(e.Msg, "out of memory") || !strings.Contains(e.Msg, mount) {
			t.Errorf("event %+v, want only Warnings %s naming the mount and the end", e, contract.EventGcsfuseFailed)
		}
		told = append(told, e.Pod.UID)
	}
	if strings.Join(told, ",") != "uid-1,uid-2" {
		t.Errorf("told %v, want the pod bound before, then the one bound as it ended", told)
	}
}

// A shared publish that cannot go on answers with a code the kubelet acts on, naming the
// volume: Unavailable once the table is closed (the node plugin stopping), the call's own
// code when it was cancelled before its turn, and Internal, naming the bucket, when a new
// mount fails to start; the new mount's files, written for its gcsfuse, are removed then,
// and nothing is bound or remembered.
func TestFailedPublishAnswers(t *testing.T) {
	t.Run("table closed", func(t *testing.T) {
		s, table, _, _ := publishableMounter(t)
		table.Close()
		req, r := podPublish(t, "uid-1")
		if err := s.Publish(context.Background(), req, r, s.cfg.Log); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "volume data") {
			t.Errorf("a publish on a closed table: %v, want Unavailable naming the volume", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		s, table, binds, _ := publishableMounter(t)
		req1, r1 := podPublish(t, "uid-1")
		mount := runningMount(table, req1, r1)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req2, r2 := podPublish(t, "uid-2")
		if err := s.Publish(ctx, req2, r2, s.cfg.Log); status.Code(err) != codes.Canceled {
			t.Errorf("a cancelled publish: %v, want Canceled", err)
		}
		if binds.boundTo(req2.TargetPath) != "" || table.NameOf(req2.TargetPath) != "" {
			t.Errorf("a cancelled publish bound to %s", mount)
		}
		if _, err := os.Stat(podfiles.At(s.mounterDir()).CredentialsTokenFile(mount)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a cancelled publish wrote the mount's token: %v", err)
		}
	})
	t.Run("start failed", func(t *testing.T) {
		s, table, binds, rec := publishableMounter(t)
		req, r := podPublish(t, "uid-1")
		key := sharedKey(r).Name()
		err := s.Publish(context.Background(), req, r, s.cfg.Log) // no mnt/: the new mount cannot start
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "volume data (bucket b): shared mount "+key) {
			t.Fatalf("a publish whose mount cannot start: %v, want Internal naming the volume, the bucket and the mount", err)
		}
		dir, err := podpath.OpenDir(s.mounterDir())
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		if vols, err := podfiles.CredentialVolumes(dir); err != nil || len(vols) != 0 {
			t.Errorf("credential files left after a failed start: %v %v", vols, err)
		}
		if binds.boundTo(req.TargetPath) != "" || table.NameOf(req.TargetPath) != "" || len(table.Snapshot()) != 0 {
			t.Error("a failed start left a mount or a bind")
		}
		if _, ok := s.cfg.Store.Plan(req.TargetPath); ok {
			t.Error("a failed start's target remembered")
		}
		if len(rec.Events()) != 0 {
			t.Errorf("events %+v after a failed start; the kubelet's FailedMount says it", rec.Events())
		}
	})
}

// statusLog is a nodevolume.StatusRecorder keeping the messages of the statuses recorded.
type statusLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *statusLog) Status(st *handoff.Status, _ time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, st.Message)
}

func (l *statusLog) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// A mounter that ends without a word about a mount (killed, crashed: its end of the status
// stream closed) ends the mount: its pods are told once, a Warning naming the mounter's end,
// and the mount is dead. After a reported end the stream's close tells nobody again, nor
// counts as a second end in the metrics.
func TestMounterGoneToldOnce(t *testing.T) {
	for _, reported := range []bool{false, true} {
		t.Run(map[bool]string{false: "silent", true: "reported"}[reported], func(t *testing.T) {
			s, table, _, rec := publishableMounter(t)
			statuses := &statusLog{}
			s.cfg.Metrics = statuses
			req1, r1 := podPublish(t, "uid-1")
			mount := runningMount(table, req1, r1)
			req2, r2 := podPublish(t, "uid-2")
			if err := s.Publish(context.Background(), req2, r2, s.cfg.Log); err != nil {
				t.Fatal(err)
			}
			conn := takenSilently(t, s, mount)
			want := mounterGone
			if reported {
				want = "gcsfuse exited with status 1"
				if err := handoff.SendStatus(conn, &handoff.Status{Version: handoff.Version, State: handoff.StateExited, Message: want}); err != nil {
					t.Fatal(err)
				}
			}
			offer := s.cfg.Store.TakeOffer(mount)
			s.cfg.Store.PutOffer(mount, offer) // the test's clean-up stops it
			conn.Close()
			select {
			case <-offer.Done(): // after the stream's end was handled
			case <-time.After(5 * time.Second):
				t.Fatal("the offer did not see the mounter's end")
			}
			var told []string
			for _, e := range rec.Events() {
				if e.Reason == contract.EventSharedMountJoined {
					continue
				}
				if e.Reason != contract.EventGcsfuseExited || !e.Warning || !strings.Contains(e.Msg, want) {
					t.Errorf("event %+v, want a Warning %s saying %q", e, contract.EventGcsfuseExited, want)
				}
				told = append(told, e.Pod.UID)
			}
			if strings.Join(told, ",") != "uid-1,uid-2" {
				t.Errorf("told %v, want each pod of the mount once", told)
			}
			if !table.Dead(mount) {
				t.Error("the mount of a mounter gone is not dead")
			}
			if got := statuses.messages(); len(got) != 1 || got[0] != want {
				t.Errorf("statuses recorded for metrics %q, want the one end %q", got, want)
			}
		})
	}
}

// The table's stop of a mount ends its offer, removes its mount point and its files, and
// forgets its end and its start; another mount's are left. A mount whose files cannot all
// be removed is not stopped (an error, the table tries again), and keeps what it knew.
func TestSharedStopRemovesOnlyItsMount(t *testing.T) {
	s, table, _, _ := publishableMounter(t)
	key := sharedmount.Key{Bucket: "b"}.Name()
	stopped, other := sharedmount.MountName(key, 1), sharedmount.MountName(key, 2)
	paths := podfiles.At(s.mounterDir())
	for _, name := range []string{stopped, other} {
		if err := os.MkdirAll(s.mountPath(name), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(paths.CredentialsTokenFile(name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(paths.CredentialsTokenFile(name), []byte("tok"), 0o600); err != nil {
			t.Fatal(err)
		}
		s.ended[name] = &handoff.Status{State: handoff.StateExited}
		s.starting[name] = time.Now()
	}
	table.Restore(other, []sharedmount.User{{Target: "/t/other", PodUID: "uid-2", Volume: "data"}})
	takenSilently(t, s, stopped)
	if err := (ops{s}).Stop(stopped); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{s.mountPath(stopped), filepath.Dir(paths.CredentialsTokenFile(stopped)), paths.HandoffSocket(stopped)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after the mount's stop: %v", p, err)
		}
	}
	if o := s.cfg.Store.TakeOffer(stopped); o != nil {
		t.Error("the stopped mount's offer kept")
	}
	if _, ok := s.starting[stopped]; ok || s.ended[stopped] != nil {
		t.Error("the stopped mount's start or end remembered")
	}
	for _, p := range []string{s.mountPath(other), paths.CredentialsTokenFile(other)} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("another mount's %s: %v", p, err)
		}
	}
	if _, ok := s.starting[other]; !ok || s.ended[other] == nil {
		t.Error("another mount's start or end forgotten")
	}

	// Something in the way of its files' directory: the stop fails and keeps its record.
	if err := os.WriteFile(filepath.Join(filepath.Dir(paths.CredentialsTokenFile(other)), "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (ops{s}).Stop(other); err == nil {
		t.Fatal("a stop whose files stay answered no error: the table would not try again")
	}
	if s.ended[other] == nil {
		t.Error("a failed stop forgot the mount's end")
	}

	// The mounter's directory gone (the shared directory removed): nothing left to remove.
	if err := os.RemoveAll(s.mounterDir()); err != nil {
		t.Fatal(err)
	}
	if err := (ops{s}).Stop(other); err != nil {
		t.Errorf("a stop with the mounter's directory gone: %v, want done", err)
	}
}

// Unpublish unbinds the target from its mount and hands the mount the token of a pod that
// stays: the leaving pod's token, bound to its pod, stops working once the pod is gone.
func TestUnpublishHandsTheTokenToAPodThatStays(t *testing.T) {
	s, table, _, _ := publishableMounter(t)
	req1, r1 := podPublish(t, "uid-1")
	mount := runningMount(table, req1, r1)
	s.cfg.Store.PutPlan(req1.TargetPath, nodevolume.SharedPlan{Mount: mount, Plan: &credentials.Plan{Kind: credentials.KindFederation,
		Identity: "Kubernetes service account ns/reader", Token: []byte("a.b.uid-1"), TokenExpiry: time.Now().Add(time.Hour), Config: []byte("{}\n")}})
	req2, r2 := podPublish(t, "uid-2")
	if err := s.Publish(context.Background(), req2, r2, s.cfg.Log); err != nil {
		t.Fatal(err)
	}
	if !s.Owns(req2.TargetPath) || s.Owns(filepath.Join(t.TempDir(), "another")) {
		t.Fatal("Owns does not say which targets the table binds")
	}
	token := podfiles.At(s.mounterDir()).CredentialsTokenFile(mount)
	if tok, _ := os.ReadFile(token); string(tok) != "a.b.uid-2" {
		t.Fatalf("the mount's token after the second pod joined: %q", tok)
	}
	if err := s.Unpublish(context.Background(), req2.TargetPath, s.cfg.Log); err != nil {
		t.Fatal(err)
	}
	if s.Owns(req2.TargetPath) || table.NameOf(req1.TargetPath) != mount {
		t.Errorf("after the unpublish: the target still owned %v, the staying pod's mount %q", s.Owns(req2.TargetPath), table.NameOf(req1.TargetPath))
	}
	if tok, err := os.ReadFile(token); err != nil || string(tok) != "a.b.uid-1" {
		t.Errorf("the mount's token after the second pod left: %q %v, want the staying pod's a.b.uid-1", tok, err)
	}
	if _, ok := s.cfg.Store.Plan(req2.TargetPath); ok {
		t.Error("the leaving target's plan kept")
	}
}

// detachUnder detaches, at the test's end, every mount left under dir (a failed start's or
// undo's): the temporary directory's removal would hang on a FUSE mount nobody serves.
func detachUnder(t *testing.T, dir string) {
	t.Cleanup(func() {
		mounts, _ := fusemount.MountsUnder(dir)
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	})
}

// TestFreshOffer (a short name: the hand-off socket's path is bounded): the first pod of a key
// starts its mount: a FUSE connection at the mount's own mount point
// (read-only as its volume is, the bucket its source), offered to the node's mounter under
// the mount's name with its token already written, and the target bound once the mounter
// took it; the pod is not told it
// joined anything. When the mounter reports its gcsfuse serving, the pod is told, the
// mount's start ends and its read-ahead is set.
func TestFreshOffer(t *testing.T) {
	needs.RootAndFUSE(t)
	s, table, binds, rec := publishableMounter(t)
	if err := os.MkdirAll(filepath.Join(s.cfg.Dir, sharedMountDir), 0o750); err != nil {
		t.Fatal(err)
	}
	detachUnder(t, s.cfg.Dir)
	s.cfg.OfferWait = 30 * time.Second // a passing test does not wait for it
	req, r := podPublish(t, "uid-1")
	r.Volume.ReadOnly = true
	kb := 1234
	r.Opts.ReadAheadKB = &kb
	key := sharedKey(r).Name()

	type took struct {
		vol   *handoff.Volume
		conn  *net.UnixConn
		err   error
		token error // the mount's token file when its offer appeared: its gcsfuse reads it at once
	}
	mounter := make(chan took, 1)
	go func() { // the node's mounter: takes the first offer that appears
		hd := filepath.Join(s.mounterDir(), podfiles.HandoffDir)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			socks, _ := filepath.Glob(filepath.Join(hd, "shared-*.sock"))
			if len(socks) == 1 {
				// Before the mounter takes it, the offer waiting: its token must be there.
				tokenErr := error(os.ErrNotExist)
				if name, err := podfiles.HandoffSocketVolume(filepath.Base(socks[0])); err == nil {
					_, tokenErr = os.Stat(podfiles.At(s.mounterDir()).CredentialsTokenFile(name))
				}
				conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socks[0], Net: "unix"})
				if err != nil {
					mounter <- took{err: err}
					return
				}
				v, f, err := handoff.RecvVolume(conn)
				if f != nil {
					t.Cleanup(func() { f.Close() }) // aborts the connection before the unmount
				}
				mounter <- took{v, conn, err, tokenErr}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		mounter <- took{err: errors.New("no offer appeared")}
	}()
	err := s.Publish(context.Background(), req, r, s.cfg.Log)
	got := <-mounter
	if got.conn != nil {
		defer got.conn.Close()
	}
	mount := table.NameOf(req.TargetPath)
	if mount != "" {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.stopSharedOffer(ctx, mount)
			_ = fusemount.Unmount(ctx, s.mountPath(mount), 100*time.Millisecond)
		})
	}
	if err != nil || got.err != nil {
		t.Fatalf("publish: %v; the mounter: %v", err, got.err)
	}
	if !strings.HasPrefix(mount, key) || binds.boundTo(req.TargetPath) != mount {
		t.Fatalf("the target bound to %q in the table, %q by the bind; want a mount of key %s", mount, binds.boundTo(req.TargetPath), key)
	}
	if got.vol.VolumeName != mount || got.vol.Bucket != "b" || !got.vol.ReadOnly {
		t.Errorf("the mounter was offered %+v, want read-only %s of bucket b", got.vol, mount)
	}
	info, err := fusemount.Lookup(s.mountPath(mount))
	if err != nil || info == nil || !info.ReadOnly || info.Source != "b" {
		t.Fatalf("the mount at %s: %+v %v; want a read-only FUSE mount of b", s.mountPath(mount), info, err)
	}
	if got.token != nil {
		t.Errorf("the new mount's token when its offer appeared: %v; its gcsfuse reads it at start", got.token)
	}
	if n := len(rec.Events()); n != 0 {
		t.Errorf("%d events on the first pod of a key before its gcsfuse serves, want none: %+v", n, rec.Events())
	}
	s.mu.Lock()
	_, starting := s.starting[mount]
	s.mu.Unlock()
	if !starting {
		t.Error("a mount the mounter took is not starting")
	}

	if err := handoff.SendStatus(got.conn, &handoff.Status{Version: handoff.Version, State: handoff.StateStarted, ElapsedMillis: 7}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 5*time.Second, "the pod to be told its gcsfuse serves", func() bool { return rec.Count(contract.EventGcsfuseStarted) > 0 })
	if e := rec.Events()[0]; e.Pod.UID != "uid-1" || e.Warning {
		t.Errorf("event %+v, want a Normal one on uid-1", e)
	}
	s.mu.Lock()
	_, starting = s.starting[mount]
	s.mu.Unlock()
	if starting {
		t.Error("a mount whose gcsfuse serves still counts as starting")
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", info.Major, info.Minor))
	if err != nil || strings.TrimSpace(string(b)) != "1232" && strings.TrimSpace(string(b)) != "1234" {
		t.Errorf("the mount's read_ahead_kb: %q %v, want about 1234", b, err)
	}
}

// TestUntakenOffer (a short name: the hand-off socket's path is bounded): a new mount the
// node's mounter does not take within the offer's wait fails its publish, Unavailable, and
// leaves nothing: its FUSE mount and mount point, its offer and socket, its files.
func TestUntakenOffer(t *testing.T) {
	needs.RootAndFUSE(t)
	s, table, binds, _ := publishableMounter(t)
	mnt := filepath.Join(s.cfg.Dir, sharedMountDir)
	if err := os.MkdirAll(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	detachUnder(t, s.cfg.Dir)
	// The mounter's uid and gid differ, so that a mount made for one as the other shows
	// (a mounter of that uid alone could take the offer: none does here).
	s.cfg.UID, s.cfg.GID = 1234, 5678
	// While the offer waits (long enough to be seen on a busy machine), its FUSE mount is
	// there: for the mounter's user.
	s.cfg.OfferWait = 2 * time.Second
	super := make(chan string, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if mounts, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(mnt)); len(mounts) == 1 {
				super <- mounts[0].VFSOptions
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		super <- "no mount appeared"
	}()
	req, r := podPublish(t, "uid-1")
	err := s.Publish(context.Background(), req, r, s.cfg.Log)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a publish no mounter took: %v, want Unavailable", err)
	}
	if opts := strings.Split(<-super, ","); !slices.Contains(opts, "user_id=1234") || !slices.Contains(opts, "group_id=5678") {
		t.Errorf("the offered mount is for %s; want user_id=1234,group_id=5678 (the mounter's)", strings.Join(opts, ","))
	}
	if mounts, err := fusemount.MountsUnder(s.cfg.Dir); err != nil || len(mounts) != 0 {
		t.Errorf("mounts left under the shared directory: %v %v", mounts, err)
	}
	for _, dir := range []string{mnt, filepath.Join(s.mounterDir(), podfiles.HandoffDir), filepath.Join(s.mounterDir(), "credentials")} {
		if entries, err := os.ReadDir(dir); err != nil && !errors.Is(err, os.ErrNotExist) || len(entries) != 0 {
			t.Errorf("%s after the failed start: %v %v, want empty", dir, entries, err)
		}
	}
	if binds.boundTo(req.TargetPath) != "" || table.NameOf(req.TargetPath) != "" || len(table.Snapshot()) != 0 {
		t.Error("the failed start left a mount or a bind")
	}
}
