package integration

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// A bucket mounted through NodePublishVolume and the real sidecar: files written through
// the mount land in the bucket byte for byte, and unpublish leaves nothing behind.
func TestWriteReadThroughSidecar(t *testing.T) {
	e := newEnv(t, "bkt-rw")
	pod, sc, target := mounted(t, e, contract.ModeLegacy, "bkt-rw")

	pids := pod.GcsfusePIDs()
	if len(pids) != 1 {
		t.Fatalf("want one gcsfuse for the pod, got %v", pids)
	}
	if uid := procUID(t, pids[0]); uid != "65534" {
		t.Fatalf("gcsfuse runs as uid %s, want 65534", uid)
	}
	if uid := procUID(t, sc.Cmd.Process.Pid); uid != "65534" {
		t.Fatalf("sidecar runs as uid %s, want 65534", uid)
	}

	small := []byte("hello from the pod\n")
	big := randomBytes(t, 5<<20)
	if err := os.WriteFile(filepath.Join(target, "hello.txt"), small, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(target, "out", "run1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "out", "run1", "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(target, "out", "run1", "big.bin"))
	if err != nil || len(got) != len(big) || string(got[:64]) != string(big[:64]) {
		t.Fatalf("read back %d bytes, err %v", len(got), err)
	}
	requireObject(t, "bkt-rw", "hello.txt", small)
	requireObject(t, "bkt-rw", "out/run1/big.bin", big)

	if err := pod.Unpublish(ctx(t), "data"); err != nil {
		t.Fatalf("NodeUnpublishVolume: %v", err)
	}
	if m, _ := fusemount.Lookup(target); m != nil {
		t.Fatalf("target still mounted after unpublish: %+v", m)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target not removed: %v", err)
	}
	waitNoGcsfuse(t, pod, 3*time.Second)
	if err := pod.Unpublish(ctx(t), "data"); err != nil {
		t.Fatalf("second NodeUnpublishVolume must succeed: %v", err)
	}
	// The sidecar saw a clean unmount, not a failure: it keeps running (legacy, no exit file).
	select {
	case <-sc.Done():
		t.Fatalf("sidecar exited after a clean unmount:\n%s", sc.Output())
	case <-time.After(300 * time.Millisecond):
	}
}

// Two volumes in one pod are served by two gcsfuse processes, each into its own bucket.
func TestTwoVolumesAtOnce(t *testing.T) {
	e := newEnv(t, "bkt-a", "bkt-b")
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	for vol, bkt := range map[string]string{"vol-a": "bkt-a", "vol-b": "bkt-b"} {
		if err := pod.Publish(ctx(t), vol, bkt, "implicit-dirs", false); err != nil {
			t.Fatalf("publish %s: %v", vol, err)
		}
	}
	sc, err := pod.StartSidecar(contract.ModeNative, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, vol := range []string{"vol-a", "vol-b"} {
		if _, err := testenv.WaitReady(pod.Target(vol), 20*time.Second); err != nil {
			t.Fatalf("%s not ready: %v\n%s", vol, err, sc.Output())
		}
		if err := os.WriteFile(filepath.Join(pod.Target(vol), "who"), []byte(vol), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	requireObject(t, "bkt-a", "who", []byte("vol-a"))
	requireObject(t, "bkt-b", "who", []byte("vol-b"))
	if n := len(pod.GcsfusePIDs()); n != 2 {
		t.Fatalf("want 2 gcsfuse processes, got %d", n)
	}
}

// A read-only volume serves reads and refuses writes with EROFS.
func TestReadOnlyVolume(t *testing.T) {
	e := newEnv(t, "bkt-ro")
	emu.CreateObject(fakestorageObject("bkt-ro", "input.csv", "a,b\n1,2\n"))
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := pod.Publish(ctx(t), "data", "bkt-ro", "", true); err != nil {
		t.Fatal(err)
	}
	sc, err := pod.StartSidecar(contract.ModeLegacy, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	target := pod.Target("data")
	if _, err := testenv.WaitReady(target, 20*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, sc.Output())
	}
	b, err := os.ReadFile(filepath.Join(target, "input.csv"))
	if err != nil || string(b) != "a,b\n1,2\n" {
		t.Fatalf("read = %q, %v", b, err)
	}
	err = os.WriteFile(filepath.Join(target, "new.txt"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on a read-only volume: err = %v, want EROFS", err)
	}
	if object(t, "bkt-ro", "new.txt") != nil {
		t.Fatal("an object was created through a read-only volume")
	}
}

// A bucket that does not exist: the sidecar reports why, answers the mount with I/O errors
// (so the mount point can still be stat'ed, the app container can be created and the app
// fails instead of hanging), and ends non-zero with the reason when told to exit.
func TestMissingBucketFailsClearly(t *testing.T) {
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			expectFailedVolume(t, e, mode, "no-such-bucket", `bucket "no-such-bucket" does not exist`)
		})
	}
}

// expectFailedVolume publishes bucket for a new pod whose gcsfuse cannot serve it and checks
// what the app and the user see: the mount point stats, accesses fail with EIO, and the
// sidecar, once told the workload is done, exits non-zero with wantReason in its
// termination message. The volume then unpublishes cleanly.
func expectFailedVolume(t *testing.T, e *testenv.Env, mode, bucket, wantReason string) {
	t.Helper()
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := pod.Publish(ctx(t), "data", bucket, "", false); err != nil {
		t.Fatal(err)
	}
	sc, err := pod.StartSidecar(mode, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	target := pod.Target("data")
	if _, err := testenv.WaitReady(target, 5*time.Second); err != nil {
		t.Fatalf("the mount point of a failed volume must stat (the kubelet needs it): %v\n%s", err, sc.Output())
	}
	err = os.WriteFile(filepath.Join(target, "result.txt"), []byte("x"), 0o644)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("write into a failed volume: %v, want EIO", err)
	}
	if _, err := os.ReadDir(target); !errors.Is(err, syscall.EIO) {
		t.Fatalf("listing a failed volume: %v, want EIO", err)
	}
	// The app failed; the sidecar is told to end as for any finished workload.
	if mode == contract.ModeNative {
		err = sc.Signal(syscall.SIGTERM)
	} else {
		err = podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "test"})
	}
	if err != nil {
		t.Fatal(err)
	}
	code, err := sc.Wait(10 * time.Second)
	if err != nil || code == 0 {
		t.Fatalf("sidecar exit = %d, %v; want non-zero\n%s", code, err, sc.Output())
	}
	msg, _ := os.ReadFile(filepath.Join(pod.TmpDir, "termination-log"))
	if !strings.Contains(string(msg), wantReason) {
		t.Fatalf("termination message %q does not carry the reason %q", msg, wantReason)
	}
	if err := pod.Unpublish(ctx(t), "data"); err != nil {
		t.Fatalf("unpublish of a failed volume: %v", err)
	}
}

// A second publish of the same target with the same volume succeeds; with other options it
// is AlreadyExists; a bad option is InvalidArgument naming it; a pod without the emptyDir is
// FailedPrecondition.
func TestPublishIdempotencyAndErrors(t *testing.T) {
	e := newEnv(t, "bkt-idem")
	pod, _, target := mounted(t, e, contract.ModeLegacy, "bkt-idem")
	if err := pod.Publish(ctx(t), "data", "bkt-idem", "", false); err != nil {
		t.Fatalf("second identical publish: %v", err)
	}
	if err := os.WriteFile(filepath.Join(target, "still-works"), []byte("y"), 0o644); err != nil {
		t.Fatalf("mount broken by the second publish: %v", err)
	}
	err := pod.Publish(ctx(t), "data", "bkt-idem", "implicit-dirs", false)
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("publish with other options: %v, want AlreadyExists", err)
	}
	err = pod.Publish(ctx(t), "other", "bkt-idem", "key-file=/etc/shadow", false)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "key-file") {
		t.Fatalf("disallowed option: %v, want InvalidArgument naming key-file", err)
	}
	noDir, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(noDir.TmpDir); err != nil {
		t.Fatal(err)
	}
	err = noDir.Publish(ctx(t), "data", "bkt-idem", "", false)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), contract.TmpVolumeName) {
		t.Fatalf("pod without emptyDir: %v, want FailedPrecondition naming %s", err, contract.TmpVolumeName)
	}
	if m, _ := fusemount.Lookup(noDir.Target("data")); m != nil {
		t.Fatal("a failed publish left a mount behind")
	}
}

// The hand-off directory is pod-writable: a symlink planted in place of it must not make
// the node plugin create sockets elsewhere.
func TestPublishRefusesSymlinkedHandoffDir(t *testing.T) {
	e := newEnv(t, "bkt-sym")
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, podfiles.At(pod.TmpDir).HandoffDir()); err != nil {
		t.Fatal(err)
	}
	err = pod.Publish(ctx(t), "data", "bkt-sym", "", false)
	if err == nil {
		t.Fatal("publish followed a symlinked hand-off dir")
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("node plugin wrote through the symlink: %v", entries)
	}
	if m, _ := fusemount.Lookup(pod.Target("data")); m != nil {
		t.Fatal("a failed publish left a mount behind")
	}
}

// gcsfuse exiting before it serves (as it does against Google Cloud Storage for a missing
// bucket or a denied permission) gets the same treatment as the emulator pre-flight check:
// I/O errors inside the mount, the reason reported, a non-zero exit when told to end. A
// stand-in gcsfuse that fails at start plays that part; the emulator cannot produce it.
func TestGcsfuseStartFailureAnswersIOErrors(t *testing.T) {
	e := newEnv(t, "bkt-start-fail")
	fake := filepath.Join(e.Root, "gcsfuse-failing")
	script := "#!/bin/sh\necho '{\"severity\":\"ERROR\",\"message\":\"Error: failed to mount: permission denied on bucket\"}'\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e.GcsfuseBin = fake
	expectFailedVolume(t, e, contract.ModeNative, "bkt-start-fail", "permission denied on bucket")
}

// A volume unpublished before its sidecar ever connected (a pod deleted while Pending)
// stops its offer: the hand-off socket goes with the mount, and a sidecar that starts late
// finds nothing to take for a volume that no longer exists.
func TestUnpublishBeforeTheSidecarConnects(t *testing.T) {
	e := newEnv(t, "bkt-early")
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := pod.Publish(ctx(t), "data", "bkt-early", "", false); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(podfiles.At(pod.TmpDir).HandoffDir(), podfiles.HandoffSocketName("data"))
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("no hand-off socket offered: %v", err)
	}
	if err := pod.Unpublish(ctx(t), "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("hand-off socket of the unpublished volume still offered: %v", err)
	}
}
