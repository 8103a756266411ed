package fusemount

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/procs"
)

func TestMain(m *testing.M) {
	RunProbeIfAsked() // Dead re-executes this test binary as its probe
	os.Exit(m.Run())
}

// Dead tells a mount whose server is gone (ENOTCONN) from one whose server does not answer
// yet, and a probe stuck on the latter is killed at the timeout, leaving no process behind.
func TestDeadProbe(t *testing.T) {
	requireRootFuse(t)
	target := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(target, Options{Source: "bkt", UserID: 0, GroupID: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = Unmount(ctx, target, time.Second)
	}()
	const timeout = 300 * time.Millisecond
	// Nobody reads the descriptor: a stat waits for an answer that never comes.
	start := time.Now()
	dead, err := Dead(context.Background(), target, timeout)
	if err != nil || dead {
		t.Fatalf("Dead(unanswered mount) = %v, %v; want alive", dead, err)
	}
	if took := time.Since(start); took > timeout+2*time.Second {
		t.Fatalf("Dead took %s with a %s timeout", took, timeout)
	}
	if left := procs.PIDs(func(args []string) bool {
		return len(args) == 3 && args[1] == probeArg && strings.HasPrefix(args[2], target)
	}); len(left) > 0 {
		t.Fatalf("probe processes left behind: %v", left)
	}
	// The descriptor closed: the connection is gone, and the kernel says so at once.
	// A generous bound: on a loaded machine the probe process itself may take longer than
	// timeout to start, and a timed-out probe reads as alive (slow is not dead).
	f.Close()
	const answered = 10 * time.Second
	dead, err = Dead(context.Background(), target, answered)
	if err != nil || !dead {
		t.Fatalf("Dead(mount without server) = %v, %v; want dead", dead, err)
	}
	// A plain directory is not a dead mount.
	if dead, err := Dead(context.Background(), t.TempDir(), answered); err != nil || dead {
		t.Fatalf("Dead(directory) = %v, %v", dead, err)
	}
}
