package fusemount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
)

// unmountGone unmounts target (every layer) and fails unless nothing is mounted there.
func unmountGone(t *testing.T, target string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Unmount(ctx, target, time.Second); err != nil {
		t.Fatal(err)
	}
	if m, _ := Lookup(target); m != nil {
		t.Fatalf("still mounted: %+v", m)
	}
}

// mountAt mounts a new directory of the test's with o and returns it and the connection.
func mountAt(t *testing.T, o Options) (string, *os.File) {
	t.Helper()
	target := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	fuse, err := Mount(target, o)
	if err != nil {
		t.Fatal(err)
	}
	return target, fuse
}

// unmountLater unmounts target, every layer, when the test ends.
func unmountLater(t *testing.T, target string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = Unmount(ctx, target, time.Second)
	})
}

func requireRootFuse(t *testing.T) {
	t.Helper()
	needs.RootAndFUSE(t)
}

// A mount whose server never answers (nobody reads the descriptor) must still be seen by
// Lookup and removed by Unmount: that is the state of a pod whose sidecar never started.
func TestMountLookupUnmountWithoutServer(t *testing.T) {
	requireRootFuse(t)
	target := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(target, Options{Source: "bkt", ReadOnly: true, UserID: 65534, GroupID: 65534})
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // no server: the connection is aborted, the mount stays until unmounted
	m, err := Lookup(target)
	if err != nil || m == nil {
		t.Fatalf("Lookup = %+v, %v; want the mount", m, err)
	}
	if m.FSType != FSType || m.Source != "bkt" || !m.ReadOnly {
		t.Fatalf("mount info = %+v", m)
	}
	unmountGone(t, target)
	if err := Unmount(context.Background(), target, time.Second); err != nil {
		t.Fatalf("second unmount of an unmounted path: %v", err)
	}
}

func TestMountRefusesSymlinkTarget(t *testing.T) {
	requireRootFuse(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	link := filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(link, Options{Source: "bkt"})
	if err == nil {
		f.Close()
		_ = unix.Unmount(real, unix.MNT_DETACH)
		t.Fatal("mounted through a symlink")
	}
}

// unmountReturnBound is how long an Unmount against a table that never empties may take:
// it must give up after a few attempts, not spin until the caller's deadline.
const unmountReturnBound = 2 * time.Second

// fakeTable is a mount table that always lists the target, with an umount(2) that answers
// err; it counts the umount calls.
type fakeTable struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (f *fakeTable) ops() ops {
	return ops{
		lookup: func(string) (*Info, error) { return &Info{FSType: FSType, Source: "bkt"}, nil },
		unmount: func(string, int) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.calls++
			return f.err
		},
	}
}

func (f *fakeTable) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// unmountBounded runs unmount in a goroutine and fails the test if it does not return
// within unmountReturnBound (the goroutine of a spinning unmount is then left behind; the
// test binary ends with the failure).
func unmountBounded(t *testing.T, o ops, busyWait time.Duration) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- unmount(context.Background(), "/mnt/target", busyWait, o) }()
	select {
	case err := <-res:
		return err
	case <-time.After(unmountReturnBound):
		t.Fatalf("unmount still running after %s: it loops on a mount it cannot remove", unmountReturnBound)
		return nil
	}
}

// A mount table entry that umount(2) says is not a mount (EINVAL: a stale entry, or a mount
// in another mount namespace; ENOENT: the path is gone) can never be removed from here:
// Unmount must say so with the errno wrapped, after a bounded number of attempts.
func TestUnmountStaleEntryReturnsError(t *testing.T) {
	for _, errno := range []error{unix.EINVAL, unix.ENOENT} {
		t.Run(errno.Error(), func(t *testing.T) {
			f := &fakeTable{err: errno}
			err := unmountBounded(t, f.ops(), time.Second)
			if !errors.Is(err, errno) || !strings.Contains(err.Error(), "/mnt/target") {
				t.Fatalf("unmount = %v, want an error naming the target and wrapping %v", err, errno)
			}
			if n := f.count(); n > maxStaleAnswers {
				t.Fatalf("umount called %d times, want at most %d", n, maxStaleAnswers)
			}
		})
	}
}

// A table that keeps listing the target although every umount(2) succeeds (a stack of
// mounts deeper than any real one, or a table that lies) ends with an error too.
func TestUnmountEndlessStackReturnsError(t *testing.T) {
	f := &fakeTable{}
	err := unmountBounded(t, f.ops(), time.Second)
	if err == nil || !strings.Contains(err.Error(), "still mounted") {
		t.Fatalf("unmount = %v, want a still-mounted error", err)
	}
	if n := f.count(); n > maxStackedMounts {
		t.Fatalf("umount called %d times, want at most %d", n, maxStackedMounts)
	}
}

// Stacked mounts are all removed: each umount(2) takes the top one off.
func TestUnmountRemovesStackedMounts(t *testing.T) {
	const depth = 3
	var mu sync.Mutex
	left := depth
	o := ops{
		lookup: func(string) (*Info, error) {
			mu.Lock()
			defer mu.Unlock()
			if left == 0 {
				return nil, nil
			}
			return &Info{FSType: FSType}, nil
		},
		unmount: func(string, int) error {
			mu.Lock()
			defer mu.Unlock()
			left--
			return nil
		},
	}
	if err := unmountBounded(t, o, time.Second); err != nil {
		t.Fatal(err)
	}
}

// A mount made on top of a dead one (the node plugin's revival of a target whose sidecar
// died) is what Lookup sees, and Unmount removes both.
func TestLookupSeesTheTopOfAStack(t *testing.T) {
	requireRootFuse(t)
	target := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	dead, err := Mount(target, Options{Source: "bottom", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	dead.Close()
	top, err := Mount(target, Options{Source: "top"})
	if err != nil {
		t.Fatalf("mount on a dead mount: %v", err)
	}
	defer top.Close()
	m, err := Lookup(target)
	if err != nil || m == nil || m.Source != "top" || m.ReadOnly {
		t.Fatalf("Lookup = %+v, %v; want the top mount (top, rw)", m, err)
	}
	if n, err := Depth(target); err != nil || n != 2 {
		t.Fatalf("Depth = %d, %v; want 2", n, err)
	}
	// The top taken off alone: the dead one under it stays.
	if err := UnmountTop(target); err != nil {
		t.Fatal(err)
	}
	if m, err := Lookup(target); err != nil || m == nil || m.Source != "bottom" {
		t.Fatalf("after UnmountTop: %+v, %v; want the bottom mount", m, err)
	}
	top, err = Mount(target, Options{Source: "top"})
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	unmountGone(t, target)
}
