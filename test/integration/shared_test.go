package integration

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/emulatorauth"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// sharedLinger is the node plugin's linger in these tests: short, so the stop is seen.
const sharedLinger = 700 * time.Millisecond

func newSharedEnv(t *testing.T, buckets ...string) (*testenv.Env, *testenv.Sidecar) {
	t.Helper()
	for _, b := range buckets {
		emu.CreateBucketWithOpts(fakestorageBucket(b))
	}
	return newSharedEnvOn(t, emu)
}

// newSharedEnvOn is a node plugin with the shared mode on, and its mounter running, on srv.
func newSharedEnvOn(t *testing.T, srv *emulator.Server) (*testenv.Env, *testenv.Sidecar) {
	t.Helper()
	e := sharedTestEnv(t, testenv.Options{Emulator: srv, SharedLinger: sharedLinger})
	m, err := e.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)})
	if err != nil {
		t.Fatal(err)
	}
	return e, m
}

// sharedTestEnv is a node plugin with the shared mode on (its mounter not started), with o's
// other options; o.Emulator defaults to the package's emulator. Closed at the test's end.
func sharedTestEnv(t *testing.T, o testenv.Options) *testenv.Env {
	t.Helper()
	if o.Emulator == nil {
		o.Emulator = emu
	}
	o.SidecarBin, o.Log, o.Shared = sidecarBin, testLogger(t), true
	e, err := testenv.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// sharedRequest is a new pod of e and the publish request of its shared volume "data" of
// bucket.
func sharedRequest(t *testing.T, e *testenv.Env, bucket string) (*testenv.Pod, *csi.NodePublishVolumeRequest) {
	t.Helper()
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := pod.PublishRequest("data", bucket, "", false)
	req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
	return pod, req
}

// sharedPod publishes one shared volume of bucket for a new pod (ksa: its service account)
// and waits for the mount to serve.
func sharedPod(t *testing.T, e *testenv.Env, bucket, ksa string) (*testenv.Pod, string) {
	t.Helper()
	pod, req := sharedRequest(t, e, bucket)
	req.VolumeContext[contract.CtxSAName] = ksa
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatalf("shared mount not ready: %v", err)
	}
	return pod, pod.Target("data")
}

// sharedGcsfuse lists the gcsfuse processes of the env's mounter.
func sharedGcsfuse(e *testenv.Env) []int {
	return testenv.GcsfusePIDs(func(args []string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, e.MounterDir()+"/") })
	})
}

func waitGcsfuseCount(t *testing.T, e *testenv.Env, want int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(sharedGcsfuse(e)) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d shared gcsfuse processes (%v), want %d", len(sharedGcsfuse(e)), sharedGcsfuse(e), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pods of one key are served by one gcsfuse in the mounter, with no sidecar: what one
// writes the other reads, the bytes reach the bucket, and gcsfuse stops a linger after the
// last pod, not before.
func TestSharedOneGcsfusePerKey(t *testing.T) {
	e, _ := newSharedEnv(t, "bkt-shared")
	var targets []string
	var pods []*testenv.Pod
	for range 5 {
		p, tgt := sharedPod(t, e, "bkt-shared", "default")
		pods, targets = append(pods, p), append(targets, tgt)
	}
	waitGcsfuseCount(t, e, 1, 5*time.Second)
	data := randomBytes(t, 3<<20)
	if err := os.WriteFile(filepath.Join(targets[0], "from-pod-0.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(targets[4], "from-pod-0.bin"))
	if err != nil || len(got) != len(data) {
		t.Fatalf("pod 4 read %d bytes of pod 0's file, err %v", len(got), err)
	}
	requireObject(t, "bkt-shared", "from-pod-0.bin", data)
	for _, p := range pods[:4] {
		if err := p.Unpublish(ctx(t), "data"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.ReadFile(filepath.Join(targets[4], "from-pod-0.bin")); err != nil {
		t.Fatalf("the last pod lost its mount when the others left: %v", err)
	}
	if err := pods[4].Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
	// A pod published within the linger binds the running gcsfuse.
	time.Sleep(sharedLinger / 3)
	p, tgt := sharedPod(t, e, "bkt-shared", "default")
	if n := len(sharedGcsfuse(e)); n != 1 {
		t.Fatalf("%d shared gcsfuse after a pod within the linger, want the same one", n)
	}
	if _, err := os.Stat(filepath.Join(tgt, "from-pod-0.bin")); err != nil {
		t.Fatal(err)
	}
	if err := p.Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
	waitGcsfuseCount(t, e, 0, sharedLinger+5*time.Second)
	if m, _ := fusemount.Lookup(tgt); m != nil {
		t.Fatalf("target still mounted: %+v", m)
	}
}

// Two Kubernetes service accounts never share a gcsfuse, nor do read-only and read-write.
func TestSharedKeysSeparateIdentities(t *testing.T) {
	e, _ := newSharedEnv(t, "bkt-ids")
	sharedPod(t, e, "bkt-ids", "reader-a")
	sharedPod(t, e, "bkt-ids", "reader-a")
	sharedPod(t, e, "bkt-ids", "reader-b")
	waitGcsfuseCount(t, e, 2, 5*time.Second)
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := pod.PublishRequest("data", "bkt-ids", "", true)
	req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
	req.VolumeContext[contract.CtxSAName] = "reader-a"
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	waitGcsfuseCount(t, e, 3, 5*time.Second)
	if err := os.WriteFile(filepath.Join(pod.Target("data"), "x"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write through the read-only shared mount: %v, want EROFS", err)
	}
}

// A shared gcsfuse killed while a pod reads through it (the emulator holds the read): the
// read in flight and every later access of the pods that held the mount fail with EIO, as
// from a failed disk (the mounter answers the connection in gcsfuse's place), never with an
// empty directory nor a wait without end; the next pod gets a new gcsfuse.
func TestSharedGcsfuseKilled(t *testing.T) {
	stalled, release := make(chan struct{}, 1), make(chan struct{})
	srv, err := emulator.StartWith(emulator.Options{Host: "127.0.0.1", Buckets: []string{"bkt-kill"},
		Wrap: func(_ string, storage http.Handler) (http.Handler, error) {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				metadata := strings.HasPrefix(r.URL.Path, "/storage/v1/") && r.URL.Query().Get("alt") != "media"
				if strings.Contains(r.URL.Path, "stall.bin") && !metadata {
					select {
					case stalled <- struct{}{}:
					default:
					}
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}
				storage.ServeHTTP(w, r)
			}), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	t.Cleanup(func() { close(release) }) // before the emulator's stop
	srv.CreateObject(fakestorageObject("bkt-kill", "kept.txt", "kept"))
	srv.CreateObject(fakestorageObject("bkt-kill", "stall.bin", "held by the emulator"))
	e, _ := newSharedEnvOn(t, srv)
	_, old := sharedPod(t, e, "bkt-kill", "default")
	waitGcsfuseCount(t, e, 1, 5*time.Second)
	reading := make(chan error, 1)
	go func() { // ends with the read: EIO after the kill, or the unmount at clean-up
		_, err := os.ReadFile(filepath.Join(old, "stall.bin"))
		reading <- err
	}()
	select {
	case <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("gcsfuse never asked the emulator for stall.bin")
	}
	pids := sharedGcsfuse(e)
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGcsfuseCount(t, e, 0, 5*time.Second)
	select {
	case err := <-reading:
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("the read in flight when gcsfuse died ended with %v, want EIO", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read in flight when gcsfuse died still waits 10 s later")
	}
	if _, err := os.ReadDir(old); !errors.Is(err, syscall.EIO) {
		t.Fatalf("listing the dead shared mount: %v, want EIO", err)
	}
	if err := os.WriteFile(filepath.Join(old, "new.txt"), []byte("x"), 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("writing to the dead shared mount: %v, want EIO", err)
	}
	_, fresh := sharedPod(t, e, "bkt-kill", "default")
	if b, err := os.ReadFile(filepath.Join(fresh, "kept.txt")); err != nil || string(b) != "kept" {
		t.Fatalf("the new pod's mount: %q %v", b, err)
	}
	if n := sharedGcsfuse(e); len(n) != 1 || n[0] == pids[0] {
		t.Fatalf("shared gcsfuse %v after the kill, want one new one", n)
	}
}

// A volume asking for the shared mode on a node plugin without the mounter is refused
// with a message that says how to enable it; a bad mode value is refused too.
func TestSharedRefusedWithoutMounter(t *testing.T) {
	e := newEnv(t, "bkt-nomounter")
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[string]string{contract.MountModeShared: "mounter.enabled", "node": `mountMode "node"`} {
		req := pod.PublishRequest("data", "bkt-nomounter", "", false)
		req.VolumeContext[contract.AttrMountMode] = mode
		_, err := e.Node.NodePublishVolume(ctx(t), req)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("mode %s: %v, want an error containing %q", mode, err, want)
		}
	}
}

// Pods of one federated identity share a gcsfuse whose token file carries the latest
// publish's token. When that pod ends (its token then refused by the STS), the key's file
// gets another pod's token at once, and the mount keeps working for the pods left: the
// freshest token that pod was published with, its kubelet's republish included (the token
// of its first publish has expired by then).
func TestSharedTokenHandedOver(t *testing.T) {
	const lifetime = 3 * time.Second
	a := newAuthEnvWith(t, lifetime, true, "bucket-tok")
	a.layer.SetPolicy("bucket-tok", &emulatorauth.Policy{Writers: []string{appIdentity}})
	if _, err := a.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)}); err != nil {
		t.Fatal(err)
	}
	publish := func(tok string) *testenv.Pod {
		a.rev.add(tok, appIdentity)
		pod, err := a.NewPod()
		if err != nil {
			t.Fatal(err)
		}
		req := federated(pod, "bucket-tok", tok)
		req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
		if err := pod.PublishReq(ctx(t), req); err != nil {
			t.Fatal(err)
		}
		if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		return pod
	}
	tokA, tokB := ksaToken("a"), ksaToken("b")
	podA := publish(tokA)
	podB := publish(tokB)
	files, _ := filepath.Glob(filepath.Join(a.MounterDir(), "credentials", "*", "token"))
	if len(files) != 1 {
		t.Fatalf("token files %v, want the key's one", files)
	}
	if b, _ := os.ReadFile(files[0]); string(b) != tokB {
		t.Fatal("the key's token file does not carry the latest publish's token")
	}
	if err := podB.Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
	a.rev.revoke(tokB) // pod B is gone: its token is worthless
	if b, _ := os.ReadFile(files[0]); string(b) != tokA {
		t.Fatalf("after pod B left, the one pod left, the key's file carries %q, want pod A's token", b)
	}
	// Another pod joins (its token in the file), then pod A's kubelet republishes A's volume
	// with a fresh token (requiresRepublish), A's first one worthless from then on: when the
	// other pod leaves, the token handed over is A's fresh one, not its first.
	tokC := ksaToken("c")
	podC := publish(tokC)
	tokA2 := ksaToken("a2")
	a.rev.add(tokA2, appIdentity)
	again := federated(podA, "bucket-tok", tokA2)
	again.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
	if err := podA.PublishReq(ctx(t), again); err != nil {
		t.Fatalf("pod A's republish: %v", err)
	}
	a.rev.revoke(tokA)
	if err := podC.Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
	a.rev.revoke(tokC)
	if b, _ := os.ReadFile(files[0]); string(b) != tokA2 {
		t.Fatalf("after pod C left the key's file carries %q, want pod A's republished token (its first is revoked)", b)
	}
	time.Sleep(2*lifetime + time.Second) // every access token got with B's, C's and A's first has expired
	data := randomBytes(t, 4096)
	if err := writeFile(filepath.Join(podA.Target("data"), "after-b"), data); err != nil {
		t.Fatalf("pod A's write after pod B left: %v", err)
	}
	requireObjectIn(t, a.emu, "bucket-tok", "after-b", data)
}

// The mounter's upgrade path: on SIGTERM it keeps serving the shared mounts that pods still
// use, and exits 0 once the node plugin has unmounted the last of them (the pods drained).
func TestSharedMounterDrainsOnSIGTERM(t *testing.T) {
	e, m := newSharedEnv(t, "bkt-drain")
	pod, tgt := sharedPod(t, e, "bkt-drain", "default")
	if err := m.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	select {
	case <-m.Done():
		t.Fatalf("the mounter exited on SIGTERM while a pod used its mount:\n%s", m.Output())
	default:
	}
	data := randomBytes(t, 1<<20)
	if err := os.WriteFile(filepath.Join(tgt, "during-drain.bin"), data, 0o644); err != nil {
		t.Fatalf("write while the mounter drains: %v", err)
	}
	requireObject(t, "bkt-drain", "during-drain.bin", data)
	if err := pod.Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
	code, err := m.Wait(sharedLinger + 10*time.Second)
	if err != nil || code != 0 {
		t.Fatalf("mounter after its last mount: code %d err %v\n%s", code, err, m.Output())
	}
}

// A shared publish that fails when no other pod uses the key leaves nothing behind: not the
// credentials it wrote for the key's gcsfuse into the mounter's directory, not the FUSE
// mount it made. Here the mounter's hand-off directory is a symlink (what a compromised
// mounter could plant), which the node plugin refuses to follow.
func TestSharedFailedPublishLeavesNothing(t *testing.T) {
	a := newAuthEnvWith(t, time.Hour, true, "bucket-fail")
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(a.MounterDir(), podfiles.HandoffDir)); err != nil {
		t.Fatal(err)
	}
	tok := ksaToken("a")
	a.rev.add(tok, appIdentity)
	pod, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := federated(pod, "bucket-fail", tok)
	req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
	err = pod.PublishReq(ctx(t), req)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "mounter") {
		t.Fatalf("publish through a symlinked hand-off directory: %v, want Internal naming the mounter", err)
	}
	if files, _ := filepath.Glob(filepath.Join(a.MounterDir(), "credentials", "*")); len(files) != 0 {
		t.Fatalf("the failed publish left credentials in the mounter's directory: %v", files)
	}
	mnts, _ := filepath.Glob(filepath.Join(filepath.Dir(a.MounterDir()), "mnt", "*"))
	for _, m := range append(mnts, pod.Target("data")) {
		if fm, _ := fusemount.Lookup(m); fm != nil {
			t.Fatalf("the failed publish left a mount at %s", m)
		}
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("the node plugin wrote through the symlink: %v", entries)
	}
}

// The kubelet republishes a shared target about every minute (requiresRepublish, the
// chart's default with a token audience) and retries a first publish that timed out: both
// succeed (CSI idempotency), the fresh token reaches the key's file, which the mounter's
// gcsfuse reads at each exchange, and the mount keeps working once the first token is
// worthless.
func TestSharedRepublish(t *testing.T) {
	const lifetime = 3 * time.Second
	a := newAuthEnvWith(t, lifetime, true, "bucket-repub")
	a.layer.SetPolicy("bucket-repub", &emulatorauth.Policy{Writers: []string{appIdentity}})
	if _, err := a.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)}); err != nil {
		t.Fatal(err)
	}
	pod, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	tok1 := ksaToken("first")
	a.rev.add(tok1, appIdentity)
	req := federated(pod, "bucket-repub", tok1)
	req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// The same request again: a retry after the kubelet's timeout.
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatalf("a retried publish of a shared target: %v, want success", err)
	}
	files, _ := filepath.Glob(filepath.Join(a.MounterDir(), "credentials", "*", "token"))
	if len(files) != 1 {
		t.Fatalf("token files %v, want the key's one", files)
	}
	for i := range 3 {
		tok := ksaToken("republish-" + itoa(i))
		a.rev.add(tok, appIdentity)
		if err := pod.PublishReq(ctx(t), federated(pod, "bucket-repub", tok)); err == nil {
			t.Fatal("a republish without the shared mode's attribute (another volume) succeeded")
		}
		again := federated(pod, "bucket-repub", tok)
		again.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
		if err := pod.PublishReq(ctx(t), again); err != nil {
			t.Fatalf("republish %d of a shared target: %v, want success", i, err)
		}
		if b, _ := os.ReadFile(files[0]); string(b) != tok {
			t.Fatalf("republish %d: the key's token file does not carry the fresh token", i)
		}
		a.rev.revoke(tok1) // only the fresh tokens authenticate from now on
	}
	time.Sleep(2*lifetime + time.Second) // every access token got with the first token has expired
	data := randomBytes(t, 4096)
	if err := writeFile(filepath.Join(pod.Target("data"), "after-republish"), data); err != nil {
		t.Fatalf("a write after the republishes: %v", err)
	}
	requireObjectIn(t, a.emu, "bucket-repub", "after-republish", data)
	if err := pod.Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
}

// Without the node's mounter running (crash-looping, unschedulable, not started yet), a
// shared publish fails within the offer's wait, as Unavailable naming the mounter, and
// leaves nothing behind: never a pod bound to a mount nobody serves, which would hang at its
// first access. Once the mounter runs, the kubelet's retry succeeds.
func TestSharedMounterNotRunning(t *testing.T) {
	emu.CreateBucketWithOpts(fakestorageBucket("bkt-nomounter-running"))
	e := sharedTestEnv(t, testenv.Options{SharedLinger: sharedLinger, SharedOfferWait: time.Second})
	pod, req := sharedRequest(t, e, "bkt-nomounter-running")
	start := time.Now()
	err := pod.PublishReq(ctx(t), req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), contract.SharedMounterContainerName) {
		t.Fatalf("publish without a mounter: %v, want Unavailable naming %s", err, contract.SharedMounterContainerName)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the publish failed after %s, want about the offer's wait (1 s)", d)
	}
	if m, _ := fusemount.Lookup(pod.Target("data")); m != nil {
		t.Fatal("the failed publish mounted the target")
	}
	mnts, _ := os.ReadDir(filepath.Join(filepath.Dir(e.MounterDir()), "mnt"))
	if len(mnts) != 0 {
		t.Fatalf("the failed publish left %d entries under mnt/", len(mnts))
	}
	if files, _ := filepath.Glob(filepath.Join(e.MounterDir(), "credentials", "*")); len(files) != 0 {
		t.Fatalf("the failed publish left credentials: %v", files)
	}
	if socks, _ := filepath.Glob(filepath.Join(e.MounterDir(), podfiles.HandoffDir, "*")); len(socks) != 0 {
		t.Fatalf("the failed publish left hand-off sockets: %v", socks)
	}
	if _, err := e.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)}); err != nil {
		t.Fatal(err)
	}
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatalf("the retry once the mounter runs: %v", err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(t, 4096)
	if err := writeFile(filepath.Join(pod.Target("data"), "after-retry"), data); err != nil {
		t.Fatal(err)
	}
	requireObject(t, "bkt-nomounter-running", "after-retry", data)
	if err := pod.Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
}

// Pods of one key come and go at the moment its mount's linger expires, again and again,
// two at a time: each pod's mount serves it (its write reaches the bucket and reads back),
// no key is left wedged (the last pod's mount serves too), and once every pod has left
// every generation's mount, files and gcsfuse are gone.
func TestSharedPublishesRacingTheLinger(t *testing.T) {
	const bucket, rounds = "bkt-linger-race", 25
	e, _ := newSharedEnv(t, bucket)
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for w := range 2 {
		wg.Go(func() {
			for i := range rounds {
				pod, err := e.NewPod()
				if err == nil {
					req := pod.PublishRequest("data", bucket, "", false)
					req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
					err = pod.PublishReq(ctx(t), req)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: publish: %w", w, i, err)
					return
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				data := []byte(name)
				if err := writeFile(filepath.Join(pod.Target("data"), name), data); err != nil {
					errs <- fmt.Errorf("worker %d round %d: write: %w", w, i, err)
				} else if got, err := os.ReadFile(filepath.Join(pod.Target("data"), name)); err != nil || string(got) != name {
					errs <- fmt.Errorf("worker %d round %d: read back %q: %v", w, i, got, err)
				}
				if err := pod.Unpublish(ctx(t), "data"); err != nil {
					errs <- fmt.Errorf("worker %d round %d: unpublish: %w", w, i, err)
					return
				}
				// Around the linger: the next publish lands before, at or after its expiry.
				time.Sleep(sharedLinger * time.Duration(4+(i*3+w)%5) / 6)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	for w := range 2 {
		for i := range rounds {
			name := fmt.Sprintf("w%d-%d", w, i)
			requireObject(t, bucket, name, []byte(name))
		}
	}
	last, _ := sharedPod(t, e, bucket, "default") // not wedged: the key still serves a new pod
	if err := last.Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
	waitGcsfuseCount(t, e, 0, sharedLinger+10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mnts, _ := os.ReadDir(filepath.Join(filepath.Dir(e.MounterDir()), "mnt"))
		creds, _ := filepath.Glob(filepath.Join(e.MounterDir(), "credentials", "*"))
		vols, _ := filepath.Glob(filepath.Join(e.MounterDir(), "volumes", "*"))
		if len(mnts)+len(creds)+len(vols) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every pod left: %d mount points, credentials %v, mounter volume dirs %v", len(mnts), creds, vols)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A shared mount's pods share one reader. A republish whose Secret now holds another
// service account's key is refused (AlreadyExists), and the mount's files keep the first
// account's key: one pod's Secret never changes who reads for the others.
func TestSharedRepublishAnotherAccountRefused(t *testing.T) {
	a := newAuthEnvWith(t, 0, true, "bucket-swap")
	if _, err := a.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)}); err != nil {
		t.Fatal(err)
	}
	first, other := "reader@emulator-project.iam.gserviceaccount.com", "other@emulator-project.iam.gserviceaccount.com"
	key1, err := a.layer.CreateServiceAccount(first)
	if err != nil {
		t.Fatal(err)
	}
	key2, err := a.layer.CreateServiceAccount(other)
	if err != nil {
		t.Fatal(err)
	}
	a.layer.SetPolicy("bucket-swap", &emulatorauth.Policy{Writers: []string{"serviceAccount:" + first, "serviceAccount:" + other}})
	pod, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := pod.PublishRequest("data", "bucket-swap", "", false)
	req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
	req.Secrets = map[string]string{contract.SecretKeyServiceAccount: string(key1)}
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatalf("a republish with the same key: %v", err)
	}
	swapped := pod.PublishRequest("data", "bucket-swap", "", false)
	swapped.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
	swapped.Secrets = map[string]string{contract.SecretKeyServiceAccount: string(key2)}
	err = pod.PublishReq(ctx(t), swapped)
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), other) {
		t.Fatalf("a republish with another account's key: %v, want AlreadyExists naming %s", err, other)
	}
	files, _ := filepath.Glob(filepath.Join(a.MounterDir(), "credentials", "*", "*.json"))
	if len(files) == 0 {
		t.Fatal("no key file in the mount's credentials")
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), other) {
			t.Fatalf("%s carries the other account's key after a refused republish", f)
		}
	}
	data := randomBytes(t, 4096)
	if err := writeFile(filepath.Join(pod.Target("data"), "still-first"), data); err != nil {
		t.Fatal(err)
	}
	requireObjectIn(t, a.emu, "bucket-swap", "still-first", data)
}

// A shared volume with no identity of its own reads as the pod, not as the mounter: with the
// node plugin's shared provider (the chart's mounter.identityProvider) the pod's own token
// is exchanged, and the bucket, which only the pod's account may write, takes the pod's
// write; without it, in a namespace the cluster admin did not name, the publish is refused
// with PermissionDenied before anything is mounted, started or written.
func TestSharedIdentityIsThePods(t *testing.T) {
	a := newAuthEnvOpts(t, time.Hour, func(o *testenv.Options) {
		o.Shared = true
		o.SharedADC = credentials.SharedADC{"batch"}
		o.Credentials.SharedProvider = wifProvider
	}, "bucket-own")
	a.layer.SetPolicy("bucket-own", &emulatorauth.Policy{Writers: []string{appIdentity}})
	if _, err := a.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)}); err != nil {
		t.Fatal(err)
	}
	plain := func(pod *testenv.Pod, tok string) *csi.NodePublishVolumeRequest {
		req := federated(pod, "bucket-own", tok)
		delete(req.VolumeContext, contract.AttrWorkloadIdentityProvider) // nothing of its own
		req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
		return req
	}
	tok := ksaToken("own")
	a.rev.add(tok, appIdentity)
	pod, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := pod.PublishReq(ctx(t), plain(pod, tok)); err != nil {
		t.Fatalf("shared volume with the shared provider: %v", err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(pod.Target("data"), "mine"), randomBytes(t, 1024)); err != nil {
		t.Fatalf("the pod's write as its own account: %v", err)
	}
	if a.rev.count(tok) == 0 {
		t.Fatal("the pod's token was never exchanged: the mount read as someone else")
	}

	// The same volume on a node plugin without a shared provider: the mounter's ADC, refused.
	b := newAuthEnvOpts(t, time.Hour, func(o *testenv.Options) {
		o.Shared = true
		o.SharedADC = credentials.SharedADC{"batch"}
	}, "bucket-adc")
	if _, err := b.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)}); err != nil {
		t.Fatal(err)
	}
	pod2, req := sharedRequest(t, b.Env, "bucket-adc")
	err = pod2.PublishReq(ctx(t), req)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `namespace "default"`) {
		t.Fatalf("shared ADC outside the allowed namespaces: %v, want PermissionDenied naming the namespace", err)
	}
	if m, _ := fusemount.Lookup(pod2.Target("data")); m != nil {
		t.Fatal("the refused publish mounted the target")
	}
	if pids := sharedGcsfuse(b.Env); len(pids) != 0 {
		t.Fatalf("the refused publish started gcsfuse: %v", pids)
	}
	if mnts, _ := os.ReadDir(filepath.Join(filepath.Dir(b.MounterDir()), "mnt")); len(mnts) != 0 {
		t.Fatalf("the refused publish left %d entries under mnt/", len(mnts))
	}
}

// The node's mounter told to stop (its pod deleted or replaced) while a pod writes: new shared
// publishes are refused at once with Unavailable, saying the mounter is stopping; the pod
// that holds a mount keeps it for the mounter's grace, and at its end is told, with an
// Event naming the mounter's stop, and its mount fails instead of hanging or going silent.
// The next mounter takes the refused volume's retry.
func TestSharedMounterStopping(t *testing.T) {
	for _, b := range []string{"bkt-stop-held", "bkt-stop-new"} {
		emu.CreateBucketWithOpts(fakestorageBucket(b))
	}
	evs := &events{}
	e := sharedTestEnv(t, testenv.Options{SharedLinger: time.Minute, Events: evs, SharedOfferWait: 20 * time.Second})
	const grace = 4
	m, err := e.StartMounter(testenv.SidecarOptions{GraceSeconds: grace, Echo: echo(t)})
	if err != nil {
		t.Fatal(err)
	}
	held, target := sharedPod(t, e, "bkt-stop-held", "app")
	if err := writeFile(filepath.Join(target, "before"), randomBytes(t, 1024)); err != nil {
		t.Fatal(err)
	}
	if err := m.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopping := filepath.Join(e.MounterDir(), podfiles.MounterStoppingFile)
	waitFor(t, 5*time.Second, "the mounter's stopping record", func() bool { _, err := os.Stat(stopping); return err == nil })

	pod, req := sharedRequest(t, e, "bkt-stop-new")
	start := time.Now()
	err = pod.PublishReq(ctx(t), req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "is stopping") {
		t.Fatalf("a shared publish while the mounter stops: %v, want Unavailable saying it is stopping", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the refusal took %s, want it at once (not the offer wait)", d)
	}
	// The held mount serves through the grace.
	if err := writeFile(filepath.Join(target, "during"), randomBytes(t, 1024)); err != nil {
		t.Fatalf("a write through the held mount during the mounter's grace: %v", err)
	}
	ev := evs.wait(t, contract.EventGcsfuseExited, (grace+10)*time.Second)
	if !strings.Contains(ev, "stopped while pods still used the mount") || !strings.Contains(ev, contract.SharedMounterContainerName) {
		t.Errorf("the held pod's Event: %s; want it to name the mounter's stop", ev)
	}
	if _, err := m.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(target); err == nil {
		t.Fatal("the held mount still answers after its mounter ended")
	}
	_ = held.Unpublish(ctx(t), "data")

	if _, err := e.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the next mounter removes the stopping record", func() bool { _, err := os.Stat(stopping); return os.IsNotExist(err) })
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatalf("the retry on the next mounter: %v", err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A mounter killed outright (SIGKILL: its container OOM-killed, its pod force-deleted)
// reports nothing; the node plugin still tells each pod of its mounts, from the end of the
// mount's status stream, and the next pod of the key gets a new mount.
func TestSharedMounterKilled(t *testing.T) {
	emu.CreateBucketWithOpts(fakestorageBucket("bkt-mounter-killed"))
	evs := &events{}
	e := sharedTestEnv(t, testenv.Options{SharedLinger: time.Minute, Events: evs})
	m, err := e.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)})
	if err != nil {
		t.Fatal(err)
	}
	held, _ := sharedPod(t, e, "bkt-mounter-killed", "app")
	if err := m.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev := evs.wait(t, contract.EventGcsfuseExited, 10*time.Second)
	if !strings.Contains(ev, "ended without reporting it") {
		t.Errorf("the held pod's Event: %s; want it to say the mounter ended without a word", ev)
	}
	_ = held.Unpublish(ctx(t), "data")
	if _, err := e.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t)}); err != nil {
		t.Fatal(err)
	}
	if _, target := sharedPod(t, e, "bkt-mounter-killed", "app"); target == "" {
		t.Fatal("no mount for the next pod of the key")
	}
}

// One sharing key's gcsfuse driven past its memory limit (the mounter's
// --gcsfuse-memory-limit, the chart's mounter.memoryPerKey) ends alone, its pods told why;
// another key's gcsfuse in the same mounter keeps reading and writing, and the mounter runs
// on. Without the limit both share the container's, and past that the kernel takes the
// mounter and every key with it.
func TestSharedKeyMemoryLimit(t *testing.T) {
	for _, b := range []string{"bkt-mem-heavy", "bkt-mem-calm"} {
		emu.CreateBucketWithOpts(fakestorageBucket(b))
	}
	evs := &events{}
	e := sharedTestEnv(t, testenv.Options{SharedLinger: time.Minute, Events: evs})
	m, err := e.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Echo: echo(t), Args: []string{"--gcsfuse-memory-limit=" + sharedKeyMemoryLimit}})
	if err != nil {
		t.Fatal(err)
	}
	_, heavy := sharedPod(t, e, "bkt-mem-heavy", "app")
	_, calm := sharedPod(t, e, "bkt-mem-calm", "app")
	if err := writeFile(filepath.Join(calm, "before"), randomBytes(t, 4096)); err != nil {
		t.Fatal(err)
	}
	// Many files written at once: gcsfuse buffers each one's blocks in memory (streaming
	// writes) until it uploads them.
	const files, size = 12, 48 << 20
	chunk := randomBytes(t, 1<<20)
	var wg sync.WaitGroup
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(filepath.Join(heavy, fmt.Sprintf("big-%d", i)))
			if err != nil {
				return
			}
			defer f.Close()
			for written := 0; written < size; written += len(chunk) {
				if _, err := f.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	ev := evs.wait(t, contract.EventGcsfuseExited, 30*time.Second)
	if !strings.Contains(ev, "bkt-mem-heavy") || !strings.Contains(ev, "memory limit") {
		t.Fatalf("the heavy key's Event: %s; want it to name the bucket and the memory limit", ev)
	}
	// The other key serves on, in the same mounter.
	data := randomBytes(t, 1<<20)
	if err := writeFile(filepath.Join(calm, "after"), data); err != nil {
		t.Fatalf("the calm key's write after the heavy key's end: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(calm, "before")); err != nil || len(got) != 4096 {
		t.Fatalf("the calm key's read after the heavy key's end: %d bytes, %v", len(got), err)
	}
	select {
	case <-m.Done():
		t.Fatal("the mounter ended with the heavy key")
	default:
	}
}

// sharedKeyMemoryLimit is TestSharedKeyMemoryLimit's per-key limit: gcsfuse starts and serves
// under it (~88 MiB of data at rest), and twelve files written at once pass it.
const sharedKeyMemoryLimit = "256Mi"
