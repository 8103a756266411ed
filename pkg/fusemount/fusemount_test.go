package fusemount

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func requireRootFuse(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("needs /dev/fuse")
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Unmount(ctx, target, time.Second); err != nil {
		t.Fatal(err)
	}
	if m, _ := Lookup(target); m != nil {
		t.Fatalf("still mounted: %+v", m)
	}
	if err := Unmount(ctx, target, time.Second); err != nil {
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
