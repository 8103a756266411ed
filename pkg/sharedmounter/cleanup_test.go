package sharedmounter

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
)

// sharedLayout makes a shared directory as a node plugin and its mounter leave it: two
// mount points' directories under mnt/ and the mounter's files, and returns it with the
// mounter's directory opened.
func sharedLayout(t *testing.T) (string, *os.File) {
	t.Helper()
	shared := filepath.Join(t.TempDir(), "shared")
	for _, d := range []string{"mnt/k1-1", "mnt/k2-3", "mounter/handoff", "mounter/k1-1/tmp"} {
		if err := os.MkdirAll(filepath.Join(shared, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(shared, "mounter", "k1-1.token"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, err := podpath.OpenDir(filepath.Join(shared, "mounter"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	if err := podfiles.CreateMounterRunning(dir); err != nil { // as prepareSharedDir does
		t.Fatal(err)
	}
	return shared, dir
}

func TestCleanUpSharedWithoutMounter(t *testing.T) {
	shared, _ := sharedLayout(t)
	if !cleanUpSharedDir(shared, slog.Default()) {
		t.Fatal("not removed with no mount and no mounter")
	}
	if _, err := os.Lstat(shared); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", shared, err)
	}
}

// A mounter that runs and says nothing of stopping stays (the node plugin alone replaced),
// and so does its directory, decided at once.
func TestCleanUpSharedKeepsARunningMounter(t *testing.T) {
	shared, dir := sharedLayout(t)
	running, err := podfiles.HoldMounterRunning(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	start := time.Now()
	if cleanUpSharedDir(shared, slog.Default()) {
		t.Fatal("removed under a running mounter")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("kept after %s, want at once: every restart of the node plugin would wait", took)
	}
	if _, err := os.Stat(filepath.Join(shared, "mounter", "k1-1.token")); err != nil {
		t.Errorf("the mounter's files: %v", err)
	}
}

// Uninstall: the mounter is stopping when the node plugin stops, and ends a moment later.
func TestCleanUpSharedWaitsForAStoppingMounter(t *testing.T) {
	shared, dir := sharedLayout(t)
	running, err := podfiles.HoldMounterRunning(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := podfiles.WriteMounterStopping(dir, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ended := time.AfterFunc(mounterGoneWait/2, func() { running.Close() })
	defer ended.Stop()
	if !cleanUpSharedDir(shared, slog.Default()) {
		t.Fatal("not removed once the stopping mounter ended")
	}
	if _, err := os.Lstat(shared); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", shared, err)
	}
}

// A mounter that starts while the node plugin removes the directory (it opened its lock
// file before the removal and waits for the node plugin's lock) finds its directory gone
// and fails, rather than wait for offers in a directory nobody sends them to.
func TestMounterStartingInARemovedDirectory(t *testing.T) {
	shared, dir := sharedLayout(t)
	gone, unlock, err := podfiles.LockMounterGone(dir)
	if err != nil || !gone {
		t.Fatalf("LockMounterGone = %v, %v", gone, err)
	}
	got := make(chan error, 1)
	go func() {
		f, err := podfiles.HoldMounterRunning(dir, 10*time.Second)
		if err == nil {
			f.Close()
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // the mounter has opened the file and waits for the lock
	if err := os.RemoveAll(shared); err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := <-got; !errors.Is(err, podfiles.ErrDirRemoved) {
		t.Fatalf("HoldMounterRunning in a removed directory: %v, want ErrDirRemoved", err)
	}
}

// What the mounter's user may leave in place of the lock file (a FIFO would hang the root
// node plugin's open, a hard link lock a file elsewhere) is refused: kept, not trusted.
func TestCleanUpSharedRefusesAStrangeLockFile(t *testing.T) {
	shared, dir := sharedLayout(t)
	if err := os.Remove(filepath.Join(dir.Name(), podfiles.MounterRunningFile)); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir.Name(), podfiles.MounterRunningFile), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() { done <- cleanUpSharedDir(shared, slog.Default()) }()
	select {
	case removed := <-done:
		if removed {
			t.Fatal("removed with a FIFO for a lock file")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cleanup hangs on a FIFO")
	}
}

// A mount under the shared directory (pods still use it) keeps it whole.
func TestCleanUpSharedKeepsMounts(t *testing.T) {
	needs.Root(t)
	shared, _ := sharedLayout(t)
	mnt := filepath.Join(shared, "mnt", "k1-1")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(mnt, "object"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cleanUpSharedDir(shared, slog.Default()) {
		t.Fatal("removed with a mount under it")
	}
	if _, err := os.Stat(filepath.Join(mnt, "object")); err != nil {
		t.Errorf("the mount's content: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shared, "mounter", "k1-1.token")); err != nil {
		t.Errorf("the mounter's files, which its mounts still need: %v", err)
	}
}

// A hard link or a symlink in place of the lock file is not locked (it would lock, or
// stand for, a file elsewhere), and a missing one keeps the directory: whether a mounter runs
// cannot be told. The node plugin's start replaces what is not a lock file.
func TestMounterRunningFileChecked(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, path, elsewhere string){
		"hard link": func(t *testing.T, path, elsewhere string) {
			if err := os.Link(elsewhere, path); err != nil {
				t.Fatal(err)
			}
		},
		"symlink": func(t *testing.T, path, elsewhere string) {
			if err := os.Symlink(elsewhere, path); err != nil {
				t.Fatal(err)
			}
		},
		"missing": func(*testing.T, string, string) {},
	} {
		t.Run(name, func(t *testing.T) {
			shared, dir := sharedLayout(t)
			path := filepath.Join(dir.Name(), podfiles.MounterRunningFile)
			elsewhere := filepath.Join(shared, "elsewhere")
			if err := os.WriteFile(elsewhere, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			plant(t, path, elsewhere)
			if gone, _, err := podfiles.LockMounterGone(dir); gone || err == nil {
				t.Errorf("LockMounterGone = %v, %v; want an error", gone, err)
			}
			if cleanUpSharedDir(shared, slog.Default()) {
				t.Error("removed the directory")
			}
			if err := podfiles.CreateMounterRunning(dir); err != nil {
				t.Fatalf("the node plugin's start: %v", err)
			}
			if gone, unlock, err := podfiles.LockMounterGone(dir); !gone || err != nil {
				t.Errorf("after the node plugin's start: LockMounterGone = %v, %v", gone, err)
			} else {
				unlock()
			}
		})
	}
}

// A shared publish still running (one the gRPC server's stop left behind) keeps the shared
// directory; once it has ended the directory goes, and a publish after the cleanup is
// refused with Unavailable (the kubelet retries it on the next node plugin) rather than
// mounting under a directory being removed.
func TestCleanUpSharedWaitsForPublishes(t *testing.T) {
	shared, _ := sharedLayout(t)
	s := bareMounter(t, shared)
	s.table = &sharedmount.Table{}
	s.gate.RLock()
	if s.CleanUp() {
		t.Fatal("removed while a shared publish runs")
	}
	if _, err := os.Stat(filepath.Join(shared, "mounter", "k1-1.token")); err != nil {
		t.Fatalf("the mounter's files while a publish runs: %v", err)
	}
	s.gate.RUnlock()
	if !s.CleanUp() {
		t.Fatal("not removed once the publish ended")
	}
	err := s.publishShared(context.Background(), &nodevolume.Request{}, "", nil, nil, slog.New(slog.DiscardHandler))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a publish after the cleanup: %v, want Unavailable", err)
	}
}

// The shared directory's removal stops, keeping the mounter's files, at a mount point that
// does not go (a publish still running mounted it after the check: here, one not empty) and
// at a mount that appeared anywhere under it; what is not the shared mode's own is left, and
// the removal reported as not whole.
func TestRemoveSharedDirStops(t *testing.T) {
	kept := func(t *testing.T, shared string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(shared, "mounter", "k1-1.token")); err != nil {
			t.Errorf("the mounter's files: %v", err)
		}
	}
	t.Run("a mount point that does not go", func(t *testing.T) {
		shared, _ := sharedLayout(t)
		if err := os.WriteFile(filepath.Join(shared, "mnt", "k2-3", "object"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if removeSharedDir(shared, slog.New(slog.DiscardHandler)) {
			t.Fatal("removed with a mount point that does not go")
		}
		kept(t, shared)
	})
	t.Run("a mount that appeared", func(t *testing.T) {
		needs.Root(t)
		shared, _ := sharedLayout(t)
		at := filepath.Join(shared, "mounter", "k1-1", "tmp")
		if err := unix.Mount("tmpfs", at, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(at, unix.MNT_DETACH)
		if removeSharedDir(shared, slog.New(slog.DiscardHandler)) {
			t.Fatal("removed with a mount under it")
		}
		kept(t, shared)
	})
	t.Run("something else there", func(t *testing.T) {
		shared, _ := sharedLayout(t)
		other := filepath.Join(shared, "not-ours")
		if err := os.WriteFile(other, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if removeSharedDir(shared, slog.New(slog.DiscardHandler)) {
			t.Fatal("reported removed whole with something else left in it")
		}
		if _, err := os.Stat(other); err != nil {
			t.Errorf("what is not the shared mode's: %v", err)
		}
		for _, gone := range []string{"mnt", "mounter"} {
			if _, err := os.Lstat(filepath.Join(shared, gone)); !os.IsNotExist(err) {
				t.Errorf("%s left: %v", gone, err)
			}
		}
	})
}
