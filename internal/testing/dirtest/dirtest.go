// Package dirtest gives tests the pinned directories the node plugin and the sidecar work
// on (pkg/podpath descriptors), made as the kubelet makes them, and checks on what was
// written there.
package dirtest

import (
	"os"
	"syscall"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Pinned is a new temporary directory and a pinned descriptor of it, closed at the test's
// end.
func Pinned(t testing.TB) (*os.File, string) {
	t.Helper()
	p := t.TempDir()
	d, err := podpath.OpenDir(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, p
}

// EmptyDir is Pinned made as the kubelet makes an emptyDir (mode 0777, root's); it needs
// root, to hand files to another owner.
func EmptyDir(t testing.TB) (*os.File, string) {
	t.Helper()
	needs.Root(t)
	d, p := Pinned(t)
	if err := os.Chmod(p, 0o777); err != nil {
		t.Fatal(err)
	}
	return d, p
}

// CheckOwned fails the test unless p is no symlink, owned by uid:gid, with permissions mode.
func CheckOwned(t testing.TB, p string, uid, gid uint32, mode os.FileMode) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != uid || sys.Gid != gid || st.Mode().Perm() != mode || st.Mode()&os.ModeSymlink != 0 {
		t.Errorf("%s: uid %d gid %d mode %v, want %d %d %v", p, sys.Uid, sys.Gid, st.Mode(), uid, gid, mode)
	}
}
