package fusemount

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/procs"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fuseerr"
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
	unmountLater(t, target)
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

// A connection whose server died is dead to Dead even while the kernel still answers a stat
// of the mount point from its attribute cache (here fuseerr's 1 s; gcsfuse's is longer):
// the node plugin's revival of a target whose sidecar died must not take it for alive. The
// stat after the death must hit the cache for the test to say anything: a try whose cache
// expired first (a loaded machine) is made again.
func TestDeadThroughTheAttributeCache(t *testing.T) {
	requireRootFuse(t)
	for try := 1; try <= 3; try++ {
		target, fuse := mountAt(t, Options{Source: "bkt"})
		unmount := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = Unmount(ctx, target, time.Second)
		}
		f, err := fuseerr.Pollable(fuse)
		fuse.Close()
		if err != nil {
			unmount()
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- fuseerr.Serve(f, 5*time.Second, nil) }()
		if _, err := os.Stat(target); err != nil { // the root's attributes, cached for 1 s
			f.Close()
			unmount()
			t.Fatal(err)
		}
		f.Close() // the server dies: the connection is aborted
		<-served
		if _, err := os.Stat(target); err != nil {
			t.Logf("try %d: stat after the server died: %v (the attribute cache had expired); again", try, err)
			unmount()
			continue
		}
		dead, err := Dead(context.Background(), target, time.Second)
		unmount()
		if err != nil || !dead {
			t.Fatalf("Dead = %v, %v while a stat still answered from the cache; want true", dead, err)
		}
		return
	}
	t.Fatal("the attribute cache never answered a stat after the server died, in 3 tries")
}

// A dead mount's statfs fails at once, so its probe can end before Dead has read the byte it
// writes just before: every probe of it must still say dead. (On a loaded node Dead once
// took the end for a probe that never ran; an idle machine rarely shows that order, so this
// guards the outcome, and the e2e revival tests the order.)
func TestDeadOfADeadMountEveryTime(t *testing.T) {
	requireRootFuse(t)
	target, fuse := mountAt(t, Options{Source: "bkt"})
	fuse.Close()
	unmountLater(t, target)
	for i := range 20 {
		if dead, err := Dead(context.Background(), target, ProbeTimeout); err != nil || !dead {
			t.Fatalf("probe %d: Dead = %v, %v; want true", i, dead, err)
		}
	}
}
