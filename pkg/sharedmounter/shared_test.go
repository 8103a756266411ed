package sharedmounter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fuseerr"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The sharing key keeps apart what must never share a gcsfuse, and only that: the node's
// machine type (learnt after start) does not split a key.
func TestSharedKey(t *testing.T) {
	base := func() *nodevolume.Request {
		return &nodevolume.Request{
			Pod:    nodevolume.PodRef{Namespace: "team-a", Name: "p", UID: "u"},
			Opts:   &mountopts.Volume{Bucket: "b"},
			Creds:  &credentials.Plan{Kind: credentials.KindFederation, Identity: "Kubernetes service account team-a/reader through P"},
			Volume: handoff.Volume{Bucket: "b", Flags: []string{"--implicit-dirs"}},
		}
	}
	name := sharedKey(base()).Name()
	for what, change := range map[string]func(r *nodevolume.Request){
		"another bucket":          func(r *nodevolume.Request) { r.Volume.Bucket = "c" },
		"another option":          func(r *nodevolume.Request) { r.Volume.Flags = []string{"--implicit-dirs", "--only-dir=x"} },
		"read-only":               func(r *nodevolume.Request) { r.Volume.ReadOnly = true },
		"noexec":                  func(r *nodevolume.Request) { r.Opts.NoExec = true },
		"another service account": func(r *nodevolume.Request) { r.Creds.Identity = "Kubernetes service account team-a/writer through P" },
		"a Secret's key in another namespace": func(r *nodevolume.Request) {
			r.Creds = &credentials.Plan{Kind: credentials.KindKey, Identity: "sa@p.iam"}
			r.Pod.Namespace = "team-b"
		},
	} {
		r := base()
		change(r)
		if sharedKey(r).Name() == name {
			t.Errorf("%s shares the key", what)
		}
	}
	r := base()
	r.Volume.Flags = nodevolume.WithMachineType(r.Volume.Flags, "n2-standard-4")
	r.Pod = nodevolume.PodRef{Namespace: "team-a", Name: "other", UID: "v"}
	if sharedKey(r).Name() != name {
		t.Error("another pod of the same identity, or the machine type, split the key")
	}
	k1 := base()
	k1.Creds = &credentials.Plan{Kind: credentials.KindKey, Identity: "sa@p.iam"}
	k2 := base()
	k2.Creds = &credentials.Plan{Kind: credentials.KindKey, Identity: "sa@p.iam"}
	k2.Pod.Name = "another"
	if sharedKey(k1).Name() != sharedKey(k2).Name() {
		t.Error("two pods of one namespace with the same key do not share")
	}
}

// mountUnserved mounts a FUSE connection at the shared mount name's path, that nothing
// serves yet, unmounted at the test's end; the caller owns the descriptor.
func mountUnserved(t *testing.T, s *Mounter, name string) *os.File {
	t.Helper()
	mnt := s.mountPath(name)
	if err := os.MkdirAll(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := fusemount.Mount(mnt, fusemount.Options{Source: "b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = fusemount.Unmount(ctx, mnt, 100*time.Millisecond)
	})
	return f
}

// A key's mount whose gcsfuse died is seen dead, so that no new pod is bound to it, both when
// the mounter answers it with I/O errors in gcsfuse's place (its root still stats as a
// directory) and once the kernel has aborted the connection (ENOTCONN).
func TestSharedAliveSeesADeadMount(t *testing.T) {
	needs.RootAndFUSE(t)
	s := bareMounter(t, t.TempDir())
	f := mountUnserved(t, s, "shared-dead")
	answered, err := fuseerr.Pollable(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- fuseerr.Serve(answered, 2*time.Second, nil) }()
	if st, err := os.Stat(s.mountPath("shared-dead")); err != nil || !st.IsDir() {
		t.Fatalf("the answered mount's root: %v %v, want a directory", st, err)
	}
	if (ops{s}).Alive("shared-dead") {
		t.Fatal("a mount answered with I/O errors is taken as alive")
	}
	answered.Close() // the last descriptor: the kernel aborts the connection
	<-served
	if (ops{s}).Alive("shared-dead") {
		t.Fatal("an aborted mount is taken as alive")
	}
}

// A mount whose server does not answer (a gcsfuse hung, or a descriptor nobody reads) is
// not alive once aliveWait has passed: a new pod must not be bound to it, where it would
// hang at its first access.
func TestSharedAliveTimesOut(t *testing.T) {
	needs.RootAndFUSE(t)
	s := bareMounter(t, t.TempDir())
	f := mountUnserved(t, s, "shared-silent")
	t.Cleanup(func() { f.Close() }) // aborts the connection: the statfs left waiting returns (before the unmount: cleanups run last first)
	start := time.Now()
	if (ops{s}).Alive("shared-silent") {
		t.Fatal("a mount that never answers is taken as alive")
	}
	if d := time.Since(start); d < aliveWait || d > aliveWait+2*time.Second {
		t.Fatalf("Alive answered after %s, want about %s", d, aliveWait)
	}
}

// What a node plugin killed mid-publish or mid-stop left of a shared mount that no longer
// exists goes at the next start; a live mount's files and names that are not a mount's stay.
func TestSharedOrphansRemoved(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	key := sharedmount.Key{Bucket: "b"}.Name()
	gone, live := sharedmount.MountName(key, 5), sharedmount.MountName(key, 6)
	mounter := s.mounterDir()
	for _, d := range []string{
		s.mountPath(gone), s.mountPath(live), filepath.Join(s.cfg.Dir, sharedMountDir, "not-a-mount"),
		filepath.Join(mounter, "credentials", gone), filepath.Join(mounter, "credentials", live), filepath.Join(mounter, "credentials", "data"),
		filepath.Join(mounter, podfiles.HandoffDir),
	} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{
		filepath.Join(mounter, "credentials", gone, "token"), filepath.Join(mounter, "credentials", live, "token"),
		filepath.Join(mounter, podfiles.HandoffDir, podfiles.HandoffSocketName(gone)), filepath.Join(mounter, podfiles.HandoffDir, podfiles.HandoffSocketName(live)),
		filepath.Join(mounter, podfiles.HandoffDir, podfiles.HandoffSocketName("data")),
	} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.removeSharedOrphans(map[string]bool{live: true})
	for _, p := range []string{s.mountPath(gone), filepath.Join(mounter, "credentials", gone), filepath.Join(mounter, podfiles.HandoffDir, podfiles.HandoffSocketName(gone))} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	for _, p := range []string{s.mountPath(live), filepath.Join(mounter, "credentials", live, "token"), filepath.Join(mounter, podfiles.HandoffDir, podfiles.HandoffSocketName(live)),
		filepath.Join(s.cfg.Dir, sharedMountDir, "not-a-mount"), filepath.Join(mounter, "credentials", "data"),
		filepath.Join(mounter, podfiles.HandoffDir, podfiles.HandoffSocketName("data"))} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// A mount found at start-up has no status stream; once its connection is found dead (its
// gcsfuse or the whole mounter ended after the node plugin restarted: the mounter answering
// in gcsfuse's place, EIO, or the connection aborted, ENOTCONN) its pods are told, naming the
// bucket, and it is no longer watched. A live mount, and one that does not answer (slow is
// not dead), are left alone.
func TestRecoveredMountsWatched(t *testing.T) {
	needs.RootAndFUSE(t)
	rec := &podevents.Recorder{}
	s := bareMounter(t, t.TempDir())
	s.cfg.Events = rec
	table := withTable(t, s)
	key := sharedmount.Key{Bucket: "b"}.Name()
	live, answered, silent := sharedmount.MountName(key, 1), sharedmount.MountName(key, 2), sharedmount.MountName(key, 3)
	if err := os.MkdirAll(s.mountPath(live), 0o750); err != nil { // statfs answers: a serving gcsfuse's stand-in
		t.Fatal(err)
	}
	f := mountUnserved(t, s, answered)
	eio, err := fuseerr.Pollable(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = fuseerr.Serve(eio, 2*time.Second, nil) }() // the mounter answering a dead gcsfuse
	t.Cleanup(func() { eio.Close() })
	hung := mountUnserved(t, s, silent)
	t.Cleanup(func() { hung.Close() })
	w := &recoveredWatch{m: s, mounts: map[string]handoff.Volume{}, pending: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	for i, name := range []string{live, answered, silent} {
		uid := fmt.Sprintf("uid-%d", i)
		table.Restore(name, []sharedmount.User{{Target: "/t/" + uid, PodNamespace: "ns", PodName: "p" + uid, PodUID: uid, Volume: "data"}})
		w.mounts[name] = handoff.Volume{VolumeName: name, Bucket: "b"}
	}
	told := func() []string {
		var uids []string
		for _, e := range rec.Events() {
			if e.Reason != contract.EventGcsfuseExited || !strings.Contains(e.Msg, "bucket b") || !strings.Contains(e.Msg, "node plugin restarted") {
				t.Errorf("event %+v, want GcsfuseExited naming the bucket and the restart", e)
			}
			uids = append(uids, e.Pod.UID)
		}
		return uids
	}
	if n := w.round(); n != 2 || !slices.Equal(told(), []string{"uid-1"}) {
		t.Fatalf("first round: %d watched, told %v; want the answered mount's pod told, the live and the silent ones watched", n, told())
	}
	hung.Close() // the last descriptor: the kernel aborts the connection, as when the mounter dies
	deadline := time.Now().Add(5 * time.Second)
	for w.round() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the aborted mount still watched; told %v", told())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := told(); !slices.Equal(got, []string{"uid-1", "uid-2"}) {
		t.Fatalf("told %v, want uid-1 then uid-2 (the live mount's pod never)", got)
	}
}

// bareMounter is a Mounter over dir without New: no directory made or chowned, no table
// (tests that need one set it), volume files owned by the test's user.
func bareMounter(t *testing.T, dir string) *Mounter {
	t.Helper()
	files, err := nodevolume.NewFiles(nodevolume.Files{KubeletRoot: "/var/lib/kubelet", MounterDir: MounterDir(dir), UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	return &Mounter{cfg: Config{Dir: dir, MounterTmpPath: "/gcsfuse-tmp", KubeletRoot: "/var/lib/kubelet", UID: os.Getuid(), GID: os.Getgid(),
		UnmountBusyWait: time.Second, OfferWait: time.Second, Store: nodevolume.NewStore(), Files: files,
		Metrics: nodevolume.NoStatus{}, Log: slog.New(slog.DiscardHandler)},
		ended: map[string]*handoff.Status{}, starting: map[string]time.Time{}}
}

// Unpublish of a target the table does not bind cleans it up as the node's other mounter
// would (Config.Unbound), never leaves its offer record or files behind.
func TestUnpublishOfAnUnboundTarget(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	withTable(t, s)
	var unbound []string
	s.cfg.Unbound = func(target string) { unbound = append(unbound, target) }
	target := filepath.Join(t.TempDir(), "never-mounted")
	if err := s.Unpublish(context.Background(), target, s.cfg.Log); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(unbound, []string{target}) {
		t.Fatalf("Unbound called with %q, want the target once", unbound)
	}
}

// A shared publish is refused (Unavailable, the kubelet retries) while the node's mounter
// says it is stopping, and goes on once that record is stale: its deadline long past (a
// mounter killed before it could remove it), or gone.
func TestPublishWaitsOnlyForAStoppingMounter(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	if err := os.MkdirAll(s.mounterDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(s.mounterDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	r := &nodevolume.Request{Target: podfiles.Target{VolumeName: "data"}, Volume: handoff.Volume{Bucket: "b"}}
	if err := s.mounterNotStopping(r); err != nil {
		t.Fatalf("no stopping record: %v", err)
	}
	if err := podfiles.WriteMounterStopping(dir, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	err = s.mounterNotStopping(r)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a mounter stopping for another minute: %v, want Unavailable", err)
	}
	for _, w := range []string{"volume data", "bucket b", contract.SharedMounterContainerName, "until "} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	// Its deadline passed 25 s ago: within the 30 s a mounter is given to end after it.
	if err := podfiles.WriteMounterStopping(dir, time.Now().Add(-25*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.mounterNotStopping(r); status.Code(err) != codes.Unavailable {
		t.Fatalf("a mounter 25 s past its deadline: %v, want Unavailable", err)
	}
	if err := podfiles.WriteMounterStopping(dir, time.Now().Add(-35*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.mounterNotStopping(r); err != nil {
		t.Fatalf("a stopping record past its deadline and the 30 s after (a dead mounter's): %v, want none", err)
	}
	if err := os.RemoveAll(s.mounterDir()); err != nil {
		t.Fatal(err)
	}
	if err := s.mounterNotStopping(r); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "volume data") {
		t.Fatalf("no mounter's directory: %v, want Internal naming the volume", err)
	}
}

// The watch of recovered mounts keeps going while one mount with a pod is left to watch,
// however many there were, and ends once none is: its last mount's death must still reach
// its pods.
func TestRecoveredWatchKeepsItsLastMount(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	table := withTable(t, s)
	live := sharedmount.MountName(sharedmount.Key{Bucket: "b"}.Name(), 1)
	if err := os.MkdirAll(s.mountPath(live), 0o750); err != nil { // statfs answers: a serving gcsfuse's stand-in
		t.Fatal(err)
	}
	table.Restore(live, []sharedmount.User{{Target: "/t/uid-1", PodNamespace: "ns", PodName: "p", PodUID: "uid-1", Volume: "data"}})
	w := &recoveredWatch{m: s, interval: 10 * time.Millisecond, mounts: map[string]handoff.Volume{live: {VolumeName: live, Bucket: "b"}},
		pending: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run() // ends at close below
	select {
	case <-w.done:
		t.Fatal("the watch ended with a live mount of a pod still to watch")
	case <-time.After(300 * time.Millisecond): // thirty rounds
	}
	w.mu.Lock()
	n := len(w.mounts)
	w.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d mounts watched, want the live one", n)
	}
	w.forget(live)
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		w.close()
		t.Fatal("the watch kept running with nothing left to watch")
	}
}

// A node plugin restarted beside a serving shared mount keeps what the mount's gcsfuse
// reads (its token file, its hand-off socket) and removes only what belongs to mounts that
// are gone: Recover counts the mounts it finds as live before the orphans are swept.
func TestRecoverKeepsTheFilesOfLiveMounts(t *testing.T) {
	needs.RootAndFUSE(t)
	s := bareMounter(t, t.TempDir())
	s.cfg.KubeletRoot = t.TempDir()
	if err := os.MkdirAll(filepath.Join(s.cfg.KubeletRoot, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	table, err := sharedmount.New(ops{s}, time.Hour, s.cfg.Log)
	if err != nil {
		t.Fatal(err)
	}
	s.table = table
	t.Cleanup(s.Close)
	key := sharedmount.Key{Bucket: "b"}.Name()
	gone, live := sharedmount.MountName(key, 1), sharedmount.MountName(key, 2)
	for _, name := range []string{gone, live} {
		if err := os.MkdirAll(filepath.Join(s.mounterDir(), "credentials", name), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.mounterDir(), "credentials", name, "token"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(s.mountPath(gone), 0o750); err != nil {
		t.Fatal(err)
	}
	f := mountUnserved(t, s, live) // a mount the previous node plugin made
	t.Cleanup(func() { f.Close() })
	if n, err := s.Recover(); err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v; want the one live mount", n, err)
	}
	if _, err := os.Stat(filepath.Join(s.mounterDir(), "credentials", live, "token")); err != nil {
		t.Errorf("the live mount's token removed at the restart: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(s.mounterDir(), "credentials", gone)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the gone mount's files left: %v", err)
	}
}

// withTable gives s a table of shared mounts of its own (closed at the test's end).
func withTable(t *testing.T, s *Mounter) *sharedmount.Table {
	t.Helper()
	table, err := sharedmount.New(ops{s}, time.Hour, s.cfg.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(table.Close)
	s.table = table
	return table
}

// recoveredPodLookup is a pod watcher's cache knowing one pod, uid-b (ns/p-b): a user found
// at start-up has only its UID and is named through it.
func recoveredPodLookup(uid string) (*corev1.Pod, bool) {
	if uid != "uid-b" {
		return nil, false
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-b", UID: types.UID(uid)}}, true
}

// Every report of the mounter reaches the pods of the mount it names, and only them: a
// serving gcsfuse is a Normal GcsfuseStarted; an end is a Warning, GcsfuseFailed for a
// failed start and GcsfuseExited for an exit or a refusal, naming the volume, the bucket,
// the identity, the mount and the mounter's words, and the mount is dead from then on. A
// report ends the mount's start (Alive asks it again); a report about a replaced generation,
// or a second end, tells nobody. A pod found at start-up is named through the pod watcher.
func TestSharedStatusTellsTheMountsPods(t *testing.T) {
	key := sharedmount.Key{Bucket: "b"}.Name()
	old, cur := sharedmount.MountName(key, 1), sharedmount.MountName(key, 2)
	other := sharedmount.MountName(sharedmount.Key{Bucket: "c"}.Name(), 3)
	vol := handoff.Volume{VolumeName: cur, Bucket: "b", Identity: "ksa ns/reader"}
	setup := func(t *testing.T) (*Mounter, *sharedmount.Table, *podevents.Recorder) {
		s := bareMounter(t, t.TempDir())
		rec := &podevents.Recorder{}
		s.cfg.Events = rec
		s.cfg.Pods = recoveredPodLookup
		table := withTable(t, s)
		table.Restore(old, []sharedmount.User{{Target: "/t/old", PodNamespace: "ns", PodName: "p-old", PodUID: "uid-old", Volume: "data"}})
		table.Restore(cur, []sharedmount.User{
			{Target: "/t/a", PodNamespace: "ns", PodName: "p-a", PodUID: "uid-a", Volume: "data"},
			{Target: "/t/b", PodUID: "uid-b", Volume: "vol-b"}, // found at start-up
		})
		table.Restore(other, []sharedmount.User{{Target: "/t/c", PodNamespace: "ns", PodName: "p-c", PodUID: "uid-c", Volume: "data"}})
		s.starting[cur] = time.Now()
		return s, table, rec
	}
	for _, tc := range []struct {
		state, reason string
		warning, ends bool
	}{
		{handoff.StateStarted, contract.EventGcsfuseStarted, false, false},
		{handoff.StateExited, contract.EventGcsfuseExited, true, true},
		{handoff.StateFailed, contract.EventGcsfuseFailed, true, true},
		{handoff.StateRefused, contract.EventGcsfuseExited, true, true},
		{handoff.StateTerminating, "", false, false},
	} {
		t.Run(tc.state, func(t *testing.T) {
			s, table, rec := setup(t)
			st := &handoff.Status{State: tc.state, Message: "gcsfuse said why", ElapsedMillis: 42}
			s.onSharedStatus(cur, vol, st, s.cfg.Log)
			events := rec.Events()
			if tc.reason == "" {
				if len(events) != 0 {
					t.Fatalf("a %s report told %+v, want nobody", tc.state, events)
				}
			} else {
				want := []nodevolume.PodRef{{Namespace: "ns", Name: "p-a", UID: "uid-a"}, {Namespace: "ns", Name: "p-b", UID: "uid-b"}}
				if len(events) != 2 {
					t.Fatalf("a %s report told %+v, want the two pods of %s", tc.state, events, cur)
				}
				for i, e := range events {
					if e.Pod != want[i] || e.Reason != tc.reason || e.Warning != tc.warning {
						t.Errorf("event %+v, want %s (warning %v) on %+v", e, tc.reason, tc.warning, want[i])
					}
					words := []string{"volume " + []string{"data", "vol-b"}[i], "bucket b"}
					if tc.ends {
						words = append(words, "identity ksa ns/reader", cur, "gcsfuse said why")
					} else {
						words = append(words, "after 42 ms")
					}
					for _, w := range words {
						if !strings.Contains(e.Msg, w) {
							t.Errorf("the %s message %q does not say %q", e.Reason, e.Msg, w)
						}
					}
				}
			}
			s.mu.Lock()
			_, starting := s.starting[cur]
			ended := s.ended[cur]
			s.mu.Unlock()
			if starting != (tc.state == handoff.StateTerminating) {
				t.Errorf("after a %s report the mount counts as starting: %v", tc.state, starting)
			}
			if tc.ends != (ended == st) || tc.ends != table.Dead(cur) {
				t.Errorf("after a %s report: ended %+v, dead %v; want both %v", tc.state, ended, table.Dead(cur), tc.ends)
			}
			if table.Dead(old) || table.Dead(other) {
				t.Error("another mount taken for dead")
			}
			if tc.ends { // a second end (the stream's after the report) tells nobody again
				s.onSharedStatus(cur, vol, &handoff.Status{State: handoff.StateExited, Message: mounterGone}, s.cfg.Log)
				if n := len(rec.Events()); n != 2 {
					t.Errorf("a second end told the pods again: %d events", n)
				}
			}
		})
	}
	t.Run("late report of a replaced generation", func(t *testing.T) {
		s, table, rec := setup(t)
		s.onSharedStatus(old, handoff.Volume{VolumeName: old, Bucket: "b"}, &handoff.Status{State: handoff.StateExited, Message: "late"}, s.cfg.Log)
		for _, e := range rec.Events() {
			if e.Pod.UID != "uid-old" {
				t.Errorf("a report of %s told %+v", old, e)
			}
		}
		if table.Dead(cur) || s.ended[cur] != nil || table.Users(cur) == nil {
			t.Errorf("a report of the replaced %s touched its replacement %s", old, cur)
		}
		s.mu.Lock()
		_, starting := s.starting[cur]
		s.mu.Unlock()
		if !starting {
			t.Error("a report of the replaced generation ended the replacement's start")
		}
	})
}

// The shared mounts' metrics view: the mounter's directory, the live mounts (the volume its
// gcsfuse series carry), and gcsfuse_csi_shared_mount_pods, 1 for each pod volume bound to a
// live mount, labelled with the mount, the pod (one found at start-up named through the pod
// watcher) and the volume. A dead mount's pods are not counted.
func TestSharedMetricsCountEachPodOfALiveMount(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	s.cfg.Pods = recoveredPodLookup
	table := withTable(t, s)
	a := sharedmount.MountName(sharedmount.Key{Bucket: "a"}.Name(), 1)
	b := sharedmount.MountName(sharedmount.Key{Bucket: "b"}.Name(), 2)
	dead := sharedmount.MountName(sharedmount.Key{Bucket: "d"}.Name(), 3)
	table.Restore(a, []sharedmount.User{
		{Target: "/t/a", PodNamespace: "ns-a", PodName: "p-a", PodUID: "uid-a", Volume: "data"},
		{Target: "/t/b", PodUID: "uid-b", Volume: "vol-b"}, // found at start-up, known to the pod watcher
	})
	table.Restore(b, []sharedmount.User{{Target: "/t/z", PodUID: "uid-z", Volume: "vol-z"}}) // found at start-up, pod unknown
	table.Restore(dead, []sharedmount.User{{Target: "/t/d", PodNamespace: "ns", PodName: "p-d", PodUID: "uid-d", Volume: "data"}})
	table.Died(dead)

	dir, keys, users := s.Metrics()
	if dir != s.mounterDir() {
		t.Errorf("metrics directory %s, want the mounter's %s", dir, s.mounterDir())
	}
	got := keys()
	slices.Sort(got)
	if want := []string{a, b}; !slices.Equal(got, want) {
		t.Errorf("keys %v, want the live mounts %v", got, want)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(users); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, mf := range mfs {
		if mf.GetName() != metricscatalog.SharedMountPods.Name {
			t.Errorf("family %s gathered", mf.GetName())
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			series = append(series, fmt.Sprintf("%s %s/%s %s = %g", l["key"], l["namespace"], l["pod"], l["volume"], m.GetGauge().GetValue()))
		}
	}
	slices.Sort(series)
	want := []string{a + " ns-a/p-a data = 1", a + " ns/p-b vol-b = 1", b + " / vol-z = 1"}
	slices.Sort(want)
	if !slices.Equal(series, want) {
		t.Errorf("series\n%s\nwant\n%s", strings.Join(series, "\n"), strings.Join(want, "\n"))
	}
}

// The wait for the node's mounter to take a new mount ends at once when it is taken; past
// Config.OfferWait it is Unavailable (the kubelet retries), and a call whose own deadline
// passes or that is cancelled first answers with the context's code; each failure names the
// volume, the bucket, the mounter's container and the mount.
func TestWaitTakenCodes(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	s.cfg.OfferWait = 50 * time.Millisecond
	r := &nodevolume.Request{Target: podfiles.Target{VolumeName: "data"}, Volume: handoff.Volume{Bucket: "b"}, Shared: "shared-k-1"}
	taken := make(chan struct{})
	close(taken)
	if err := s.waitTaken(context.Background(), r, taken, s.cfg.Log); err != nil {
		t.Fatalf("a mount taken: %v", err)
	}
	expired, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	for what, tc := range map[string]struct {
		ctx       context.Context
		offerWait time.Duration
		code      codes.Code
	}{
		"offer wait passed":   {context.Background(), 50 * time.Millisecond, codes.Unavailable},
		"the call's deadline": {expired, time.Minute, codes.DeadlineExceeded},
		"the call cancelled":  {cancelled, time.Minute, codes.Canceled},
	} {
		s.cfg.OfferWait = tc.offerWait
		start := time.Now()
		err := s.waitTaken(tc.ctx, r, make(chan struct{}), s.cfg.Log)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", what, err, tc.code)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: answered after %s", what, d)
		}
		for _, w := range []string{"volume data", "bucket b", contract.SharedMounterContainerName, "shared-k-1"} {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", what, err, w)
			}
		}
	}
}

// Alive takes a mount for dead on the errors of a gone gcsfuse (ENOTCONN, ECONNABORTED, and
// EIO from the mounter answering in its place), for alive on an answer or any other error,
// and a mount whose gcsfuse is still starting for alive without asking it, for
// sharedStartGrace (two minutes) after the mounter took it.
func TestSharedAliveErrnos(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	var answer error
	asked := 0
	s.statfs = func(string, *unix.Statfs_t) error { asked++; return answer }
	for _, tc := range []struct {
		err   error
		alive bool
	}{
		{nil, true}, {unix.EACCES, true}, {unix.ENOENT, true},
		{unix.ENOTCONN, false}, {unix.ECONNABORTED, false}, {unix.EIO, false},
		{&os.PathError{Op: "statfs", Path: "x", Err: unix.ENOTCONN}, false},
	} {
		answer = tc.err
		if got := (ops{s}).Alive("shared-k-1"); got != tc.alive {
			t.Errorf("a statfs answering %v: alive %v, want %v", tc.err, got, tc.alive)
		}
	}
	answer, asked = unix.ENOTCONN, 0
	// The grace is two minutes: the time a gcsfuse may take to answer its INIT.
	s.starting["shared-k-1"] = time.Now().Add(-2*time.Minute + 5*time.Second)
	if !(ops{s}).Alive("shared-k-1") || asked != 0 {
		t.Errorf("a mount within its start grace: asked %d times, want alive unasked", asked)
	}
	s.starting["shared-k-1"] = time.Now().Add(-2*time.Minute - time.Second)
	if (ops{s}).Alive("shared-k-1") || asked != 1 {
		t.Errorf("a mount starting for longer than its grace: asked %d times, want asked once and dead", asked)
	}
	s.starting["shared-k-1"] = time.Now()
	if (ops{s}).Alive("shared-k-2") {
		t.Error("another mount's start counted for a dead mount")
	}
}

// A node plugin restarted finds each shared mount it made and the pods' targets bound to it,
// by device number, with the pod and volume the target's path names: a subPath's bind of a
// target is no target, and a mount under mnt/ whose name is not a mount's is not counted.
// The mounts found are watched (they have no status stream).
func TestRecoverFindsEachMountsTargets(t *testing.T) {
	needs.RootAndFUSE(t)
	s := bareMounter(t, t.TempDir())
	s.cfg.KubeletRoot = t.TempDir()
	table := withTable(t, s)
	t.Cleanup(s.Close)
	live := sharedmount.MountName(sharedmount.Key{Bucket: "b"}.Name(), 4)
	f := mountUnserved(t, s, live)
	t.Cleanup(func() { f.Close() })
	g := mountUnserved(t, s, "not-a-mount")
	t.Cleanup(func() { g.Close() })
	target := podfiles.CSITargetPath(s.cfg.KubeletRoot, "uid-1", "data")
	subPath := filepath.Join(s.cfg.KubeletRoot, "pods", "uid-1", "volume-subpaths", "data", "app", "0")
	for _, at := range []string{target, subPath} {
		if err := os.MkdirAll(at, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(s.mountPath(live), at, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(at, unix.MNT_DETACH) })
	}
	if n, err := s.Recover(); err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v; want the one shared mount", n, err)
	}
	want := []sharedmount.User{{Target: target, PodUID: "uid-1", Volume: "data"}}
	if got := table.Users(live); !slices.Equal(got, want) {
		t.Errorf("the mount's targets %+v, want %+v", got, want)
	}
	if table.NameOf(target) != live || table.NameOf(subPath) != "" {
		t.Errorf("target bound to %q, subPath to %q", table.NameOf(target), table.NameOf(subPath))
	}
	s.mu.Lock()
	w := s.recovered
	s.mu.Unlock()
	if w == nil {
		t.Fatal("the mounts found are not watched")
	}
	w.mu.Lock()
	watched := maps.Clone(w.mounts)
	w.mu.Unlock()
	if len(watched) != 1 || watched[live].VolumeName != live || watched[live].Bucket != "b" {
		t.Errorf("watched %+v, want %s of bucket b alone", watched, live)
	}
}
