package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

func fakestorageBucket(name string) fakestorage.CreateBucketOpts {
	return fakestorage.CreateBucketOpts{Name: name}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func echo(t *testing.T) io.Writer {
	if testing.Verbose() {
		return tWriter{t}
	}
	return nil
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// mounted publishes one volume for a new pod, starts its sidecar and waits until the mount
// serves.
func mounted(t *testing.T, e *testenv.Env, mode, bucket string) (*testenv.Pod, *testenv.Sidecar, string) {
	t.Helper()
	return mountedWith(t, e, mode, bucket, nil)
}

// mountedWith is mounted with the NodePublishVolumeRequest changed by edit (nil: as is).
func mountedWith(t *testing.T, e *testenv.Env, mode, bucket string, edit func(*csi.NodePublishVolumeRequest)) (*testenv.Pod, *testenv.Sidecar, string) {
	t.Helper()
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := pod.PublishRequest("data", bucket, "", false)
	if edit != nil {
		edit(req)
	}
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	sc, err := pod.StartSidecar(mode, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatalf("mount not ready: %v\nsidecar output:\n%s", err, sc.Output())
	}
	return pod, sc, pod.Target("data")
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// object returns an object's bytes from the emulator (nil if absent).
func object(t *testing.T, bucket, name string) []byte { return objectIn(t, emu, bucket, name) }

// objectIn returns an object's bytes from emulator e (nil if absent).
func objectIn(t *testing.T, e *emulator.Server, bucket, name string) []byte {
	t.Helper()
	o, err := e.GetObject(bucket, name)
	if err != nil {
		return nil
	}
	return o.Content
}

func requireObject(t *testing.T, bucket, name string, want []byte) {
	t.Helper()
	requireObjectIn(t, emu, bucket, name, want)
}

func requireObjectIn(t *testing.T, e *emulator.Server, bucket, name string, want []byte) {
	t.Helper()
	got := objectIn(t, e, bucket, name)
	if got == nil {
		t.Fatalf("object %s/%s missing from the bucket", bucket, name)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("object %s/%s has %d bytes, want %d (content differs)", bucket, name, len(got), len(want))
	}
}

func waitNoGcsfuse(t *testing.T, pod *testenv.Pod, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(pod.GcsfusePIDs()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("gcsfuse still running after %s: pids %v", d, pod.GcsfusePIDs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func procUID(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Uid:") {
			return strings.Fields(l)[1]
		}
	}
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }

func fakestorageObject(bucket, name, content string) fakestorage.Object {
	return fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: name}, Content: []byte(content)}
}

// waitFor polls cond every 20 ms until it holds, failing t after d, naming what.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
