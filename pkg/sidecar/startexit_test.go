package sidecar

import (
	"context"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/dirwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// startExitWait bounds the wait for Run to return when it should do so at start.
const startExitWait = 5 * time.Second

// TestExitFileAtStartExitsZeroAtOnce guards the rule that a sidecar which starts with the
// exit file already present exits 0 at once. Such a container is one the kubelet restarted
// after its workload's end (a legacy sidecar that exited 1 under restartPolicy OnFailure):
//   - at once: before it waits for any event, since no event comes for a file that is
//     already there (the events here never deliver anything);
//   - with 0, although its predecessor lost a volume (a taken record, not offered again),
//     which a sidecar that runs reports as exit 1: its predecessor reported that, and
//     exiting 1 again would have the kubelet restart it forever.
func TestExitFileAtStartExitsZeroAtOnce(t *testing.T) {
	dir, tmp := dirtest.Pinned(t)
	if err := podfiles.WriteIn(dir, podfiles.Reason{Rule: "test-rule", Message: "workload done", WrittenAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := podfiles.WriteTaken(dir, "lost", podfiles.Taken{Bucket: "bkt", TakenAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	termLog := filepath.Join(t.TempDir(), "termination-log")
	s := newSidecar(Config{TmpDir: tmp, Mode: contract.ModeLegacy, TerminationLog: termLog,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	waited := make(chan struct{})
	s.events = func(<-chan dirwatch.Event) <-chan dirwatch.Event {
		close(waited)
		return make(chan dirwatch.Event) // nothing ever comes
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() { code <- s.Run(ctx, make(chan os.Signal)) }()
	select {
	case c := <-code:
		if c != 0 {
			msg, _ := os.ReadFile(termLog)
			t.Fatalf("exit code %d with the exit file present at start, want 0 (termination message %q)", c, msg)
		}
	case <-time.After(startExitWait):
		cancel()
		<-code
		t.Fatalf("the sidecar still served %s after starting with the exit file present", startExitWait)
	}
	select {
	case <-waited:
		t.Fatal("the sidecar waited for events before acting on the exit file present at start")
	default:
	}
}
