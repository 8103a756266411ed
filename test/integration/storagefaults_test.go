package integration

// A storage backend that misbehaves, through the emulator's faults (emulatorauth's Fault: a
// status, a delay or a dropped connection, per bucket and operation): gcsfuse's own retries
// carry a volume through them in either mode; an app whose close succeeded always has its
// object whole; a backend that fails every upload holds the close until it is back, never
// failing or succeeding it silently; a sidecar told to end while an app's upload is slow
// keeps serving until it is done.

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/emulatorauth"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// faultyBackend is an emulator of the test's own behind the auth layer with no policy (every
// request served) whose faults the test arms.
type faultyBackend struct {
	*emulator.Server
	layer *emulatorauth.Layer
}

func newFaultyBackend(t *testing.T, buckets ...string) *faultyBackend {
	t.Helper()
	b := &faultyBackend{}
	var err error
	b.Server, err = emulator.StartWith(emulator.Options{Host: "127.0.0.1", Buckets: buckets, Log: testLogger(t),
		Wrap: func(base string, storage http.Handler) (http.Handler, error) {
			b.layer, err = emulatorauth.New(emulatorauth.Config{BaseURL: base, Log: testLogger(t)}, storage)
			return b.layer, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

// node is a node plugin whose volumes' gcsfuse talks to b, closed at the test's end.
func (b *faultyBackend) node(t *testing.T) *testenv.Env {
	t.Helper()
	e, err := testenv.New(testenv.Options{Emulator: b.Server, SidecarBin: sidecarBin, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// arm sets f on bucket, disarmed at the test's end (before the envs close: a fault met only
// in part must not hold an upload that still retries).
func (b *faultyBackend) arm(t *testing.T, bucket string, f emulatorauth.Fault) {
	t.Helper()
	if err := b.layer.SetFault(bucket, &f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.layer.SetFault(bucket, nil) })
}

// stepTimeout bounds one app step of a test here: past it the step has hung, and the test
// fails with its logs rather than at go test's timeout, which skips every clean-up.
const stepTimeout = 90 * time.Second

// within runs step in its own goroutine and fails t if it has not returned in stepTimeout.
// A step that timed out leaves its goroutine in a FUSE call: the env's Close kills gcsfuse
// (SIGKILL) before it unmounts, and the call returns ENOTCONN.
func within(t *testing.T, what string, step func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- step() }()
	select {
	case err := <-done:
		return err
	case <-time.After(stepTimeout):
		t.Fatalf("%s: still waiting after %s", what, stepTimeout)
		return nil
	}
}

// requireMet fails t when a fault armed on bucket was not met whole: the step did not reach
// the backend as the test meant, so it proved nothing.
func (b *faultyBackend) requireMet(t *testing.T, bucket string) {
	t.Helper()
	if left := b.layer.FaultsLeft(bucket); len(left) != 0 {
		t.Fatalf("faults not met on %s: %v (requests of each operation still to fail)", bucket, left)
	}
}

// backendFaultSteps are what a volume must carry an app through: each fault once, then the
// app's step, which must succeed with the right bytes.
var backendFaultSteps = []struct {
	name  string
	fault emulatorauth.Fault
}{
	{"upload-503", emulatorauth.Fault{Op: emulatorauth.OpWrite, Status: http.StatusServiceUnavailable, Count: 3}},
	{"upload-429", emulatorauth.Fault{Op: emulatorauth.OpWrite, Status: http.StatusTooManyRequests, Count: 2}},
	{"upload-dropped", emulatorauth.Fault{Op: emulatorauth.OpWrite, Drop: true, Count: 2}},
	{"upload-slow", emulatorauth.Fault{Op: emulatorauth.OpWrite, DelayMS: 2500, Count: 1}},
	{"read-503", emulatorauth.Fault{Op: emulatorauth.OpRead, Status: http.StatusServiceUnavailable, Count: 2}},
	// Go's client resends a GET cut on a reused connection once by itself: three drops reach
	// gcsfuse's own retries.
	{"read-dropped", emulatorauth.Fault{Op: emulatorauth.OpRead, Drop: true, Count: 3}},
	{"read-slow", emulatorauth.Fault{Op: emulatorauth.OpRead, DelayMS: 2500, Count: 1}},
	{"list-dropped", emulatorauth.Fault{Op: emulatorauth.OpList, Drop: true, Count: 3}},
	{"list-429", emulatorauth.Fault{Op: emulatorauth.OpList, Status: http.StatusTooManyRequests, Count: 2}},
	{"stat-503", emulatorauth.Fault{Op: emulatorauth.OpMetadata, Status: http.StatusServiceUnavailable, Count: 2}},
	{"stat-dropped", emulatorauth.Fault{Op: emulatorauth.OpMetadata, Drop: true, Count: 3}},
}

// rideOut runs every step of backendFaultSteps on the mount at target of bucket.
func rideOut(t *testing.T, b *faultyBackend, bucket, target string) {
	for i, s := range backendFaultSteps {
		name := fmt.Sprintf("%02d-%s", i, s.name)
		data := randomBytes(t, 256<<10)
		start := time.Now()
		switch s.fault.Op {
		case emulatorauth.OpWrite:
			b.arm(t, bucket, s.fault)
			if err := within(t, s.name, func() error { return os.WriteFile(filepath.Join(target, name), data, 0o644) }); err != nil {
				t.Fatalf("%s: the app's write failed: %v", s.name, err)
			}
			requireObjectIn(t, b.Server, bucket, name, data)
		case emulatorauth.OpRead:
			b.CreateObject(fakestorageObject(bucket, name, string(data)))
			b.arm(t, bucket, s.fault)
			var got []byte
			err := within(t, s.name, func() (err error) { got, err = os.ReadFile(filepath.Join(target, name)); return err })
			if err != nil || string(got) != string(data) {
				t.Fatalf("%s: the app read %d bytes of %d, %v", s.name, len(got), len(data), err)
			}
		case emulatorauth.OpList:
			want := []string{"a", "b", "c"}
			b.CreateObject(fakestorageObject(bucket, name+"/", "")) // the directory (no implicit-dirs)
			for _, n := range want {
				b.CreateObject(fakestorageObject(bucket, name+"/"+n, n))
			}
			b.arm(t, bucket, s.fault)
			var ents []os.DirEntry
			err := within(t, s.name, func() (err error) { ents, err = os.ReadDir(filepath.Join(target, name)); return err })
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%s: the app listed %v, %v; want %v", s.name, got, err, want)
			}
		case emulatorauth.OpMetadata:
			b.CreateObject(fakestorageObject(bucket, name, string(data)))
			b.arm(t, bucket, s.fault)
			var st os.FileInfo
			err := within(t, s.name, func() (err error) { st, err = os.Stat(filepath.Join(target, name)); return err })
			if err != nil || st.Size() != int64(len(data)) {
				t.Fatalf("%s: the app's stat: %v, %v; want %d bytes", s.name, st, err, len(data))
			}
		}
		b.requireMet(t, bucket)
		t.Logf("%s: the app's step took %s", s.name, time.Since(start).Round(time.Millisecond))
	}
}

// gcsfuse's retries carry a sidecar's volume through 503s, 429s, dropped connections and a
// slow backend, on uploads, reads, listings and stats.
func TestSidecarVolumeRidesOutABackendsFaults(t *testing.T) {
	b := newFaultyBackend(t, "bkt-faults")
	e := b.node(t)
	_, sc, target := mounted(t, e, contract.ModeNative, "bkt-faults")
	rideOut(t, b, "bkt-faults", target)
	// What troubleshooting.md tells a user to look for in the sidecar's log.
	if out := sc.Output(); !strings.Contains(out, "Retrying") {
		t.Fatalf("the sidecar's log has no gcsfuse line beginning Retrying:\n%s", out)
	}
}

// The same through the shared mounter's gcsfuse.
func TestSharedVolumeRidesOutABackendsFaults(t *testing.T) {
	b := newFaultyBackend(t, "bkt-faults-shared")
	e, _ := newSharedEnvOn(t, b.Server)
	_, target := sharedPod(t, e, "bkt-faults-shared", "default")
	rideOut(t, b, "bkt-faults-shared", target)
}

// A backend that fails every upload holds the app's close, in either mode: no close
// succeeds without its object, and none fails while gcsfuse may still succeed. gcsfuse 3.13
// retries an upload without end, at most max-retry-sleep (30 s) apart, even with
// max-retry-attempts set (checked: 1 did not bound it); once the backend is back the close
// that waited returns with the object whole, and the mount takes the next file.
func TestBackendDownHoldsTheCloseUntilItIsBack(t *testing.T) {
	const (
		down = 5 * time.Second
		// backFor bounds the wait after the backend is back: gcsfuse's longest sleep between
		// attempts (max-retry-sleep, 30 s) and the upload.
		backFor = 45 * time.Second
	)
	b := newFaultyBackend(t, "bkt-down", "bkt-down-shared")
	e := b.node(t)
	_, _, sidecarTarget := mounted(t, e, contract.ModeNative, "bkt-down")
	se, _ := newSharedEnvOn(t, b.Server)
	_, sharedTarget := sharedPod(t, se, "bkt-down-shared", "default")
	for mode, m := range map[string]struct{ bucket, target string }{
		"sidecar": {"bkt-down", sidecarTarget}, "shared": {"bkt-down-shared", sharedTarget},
	} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b.arm(t, m.bucket, emulatorauth.Fault{Op: emulatorauth.OpWrite, Status: http.StatusServiceUnavailable, Count: 1 << 20})
			data := randomBytes(t, 256<<10)
			wrote := make(chan error, 1)
			go func() { wrote <- os.WriteFile(filepath.Join(m.target, "held.bin"), data, 0o644) }()
			// The window starts once the backend has refused the first upload.
			waitFor(t, 30*time.Second, "the first upload refused", func() bool {
				return b.layer.FaultsLeft(m.bucket)["write"] < 1<<20
			})
			select {
			case err := <-wrote:
				t.Fatalf("the app's close returned (%v) while the backend failed every upload", err)
			case <-time.After(down):
			}
			if got := objectIn(t, b.Server, m.bucket, "held.bin"); got != nil {
				t.Fatalf("an object of %d bytes while every upload failed", len(got))
			}
			failed := b.layer.FaultsLeft(m.bucket)["write"]
			b.arm(t, m.bucket, emulatorauth.Fault{Op: emulatorauth.OpWrite})
			back := time.Now()
			select {
			case err := <-wrote:
				if err != nil {
					t.Fatalf("the close that waited for the backend: %v", err)
				}
			case <-time.After(backFor):
				t.Fatalf("the close still waits %s after the backend is back", backFor)
			}
			requireObjectIn(t, b.Server, m.bucket, "held.bin", data)
			if 1<<20-failed < 2 {
				t.Fatalf("%d uploads refused while the backend was down: gcsfuse did not try again", 1<<20-failed)
			}
			t.Logf("%d uploads failed in %s; the close returned %s after the backend was back",
				1<<20-failed, down, time.Since(back).Round(time.Millisecond))
			next := randomBytes(t, 64<<10)
			if err := os.WriteFile(filepath.Join(m.target, "next.bin"), next, 0o644); err != nil {
				t.Fatalf("the mount's next write: %v", err)
			}
			requireObjectIn(t, b.Server, m.bucket, "next.bin", next)
		})
	}
}

// An upload the backend stored but whose answer was lost (the connection cut after the
// backend took it): whatever the app's close says, it never says success without the object
// whole, and a failure is loud (EIO, or ESTALE: gcsfuse 3.13 retries a new object's upload
// with a precondition, "no object yet", that the stored object fails, and says "stale file
// handle") with the object, if there, whole. Which one it was is logged.
func TestLostAnswerToAnUpload(t *testing.T) {
	b := newFaultyBackend(t, "bkt-lost-answer")
	e := b.node(t)
	_, _, target := mounted(t, e, contract.ModeNative, "bkt-lost-answer")
	for _, size := range []int{64 << 10, 4 << 20} {
		name := fmt.Sprintf("lost-answer-%d.bin", size)
		data := randomBytes(t, size)
		b.arm(t, "bkt-lost-answer", emulatorauth.Fault{Op: emulatorauth.OpWrite, DropAfter: true, Count: 1})
		err := within(t, name, func() error { return os.WriteFile(filepath.Join(target, name), data, 0o644) })
		b.requireMet(t, "bkt-lost-answer")
		got := objectIn(t, b.Server, "bkt-lost-answer", name)
		switch {
		case size == 64<<10 && (!errors.Is(err, syscall.ESTALE) || string(got) != string(data)):
			// One request carries a small file: what troubleshooting.md says of it.
			t.Fatalf("%d bytes: close %v, object of %d bytes; want ESTALE with the object whole", size, err, len(got))
		case err == nil:
			requireObjectIn(t, b.Server, "bkt-lost-answer", name, data)
			t.Logf("%d bytes: the close succeeded, the object whole", size)
		case !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.ESTALE):
			t.Fatalf("%d bytes: the close failed with %v, want EIO or ESTALE", size, err)
		case got != nil && string(got) != string(data):
			t.Fatalf("%d bytes: the close failed and the bucket has %d other bytes", size, len(got))
		default:
			t.Logf("%d bytes: the close failed with %v; the object in the bucket, whole: %v", size, err, got != nil)
		}
	}
}

// A legacy sidecar that gets SIGTERM (pod deletion) while the app's upload is slow keeps
// serving: the app's close succeeds with its object whole, and the sidecar ends on the
// node plugin's word that the workload is done.
func TestLegacyDrainOutlastsASlowUpload(t *testing.T) {
	const delay = 3 * time.Second
	b := newFaultyBackend(t, "bkt-slow-drain")
	e := b.node(t)
	pod, sc, target := mounted(t, e, contract.ModeLegacy, "bkt-slow-drain")
	b.arm(t, "bkt-slow-drain", emulatorauth.Fault{Op: emulatorauth.OpWrite, DelayMS: int(delay.Milliseconds()), Count: 1})
	data := randomBytes(t, 4<<20)
	wrote := make(chan error, 1)
	go func() { wrote <- os.WriteFile(filepath.Join(target, "slow.bin"), data, 0o644) }()
	// The upload in flight at the backend: the fault counts a request when it arrives.
	waitFor(t, 30*time.Second, "the upload at the backend", func() bool { return len(b.layer.FaultsLeft("bkt-slow-drain")) == 0 })
	if err := sc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var werr error
	select {
	case werr = <-wrote:
	case <-time.After(delay + 30*time.Second):
		t.Fatal("the app's close did not return")
	}
	select {
	case <-sc.Done():
		t.Fatalf("the sidecar ended before the workload was done:\n%s", sc.Output())
	default:
	}
	if werr != nil {
		t.Fatalf("the app's close during the drain: %v", werr)
	}
	b.requireMet(t, "bkt-slow-drain")
	requireObjectIn(t, b.Server, "bkt-slow-drain", "slow.bin", data)
	if err := podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "deleting-all-terminated"}); err != nil {
		t.Fatal(err)
	}
	if code, err := sc.Wait(10 * time.Second); err != nil || code != 0 {
		t.Fatalf("sidecar exit = %d, %v", code, err)
	}
}
