package podpath

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
)

func TestOpenDirRefusesSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "pods", "uid"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A pod replaces its emptyDir by a symlink to a host directory.
	if err := os.Symlink(outside, filepath.Join(root, "pods", "uid", "evil")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(root, "pods", "uid", "evil"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("OpenDir followed a symlink: err = %v", err)
	}
	d, err := OpenDir(root, "pods", "uid")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := MkdirOpen(d, "evil", 0o755); err == nil {
		t.Fatal("MkdirOpen opened a symlink")
	}
	if _, err := OpenDir(root, "pods", ".."); err == nil {
		t.Fatal("OpenDir accepted ..")
	}
}

func TestWriteFileAtomicDoesNotFollowSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "exit")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := WriteFileAtomic(d, "exit", []byte("done"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("write went through the symlink: victim = %q", b)
	}
	got, err := ReadFile(d, "exit", 100)
	if err != nil || string(got) != "done" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	// ReadFile refuses a symlink too.
	if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(d, "link", 100); err == nil {
		t.Fatal("ReadFile followed a symlink")
	}
	if err := Remove(d, "exit"); err != nil {
		t.Fatal(err)
	}
	if err := Remove(d, "exit"); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
}

func TestProcPathReachesPinnedDir(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.WriteFile(ProcPath(d, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); err != nil {
		t.Fatalf("file not created in the pinned dir: %v", err)
	}
}

// Rename acts on single names inside the pinned directory: a path that would leave it is
// refused, and a symlink is moved itself, never followed.
func TestRenameStaysInTheDirectory(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := Rename(d, "link", "../escaped"); err == nil {
		t.Fatal("Rename accepted a target outside the directory")
	}
	if err := Rename(d, "link", "moved"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "moved")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink itself should have moved: %v %v", fi, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("Rename touched the symlink's target: %v", entries)
	}
}

// Chmod sets the mode of the named file itself; a symlink in its place is refused and its
// target keeps its mode.
func TestChmodDoesNotFollowSymlinks(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "secret")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := Chmod(d, "f", 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "f")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := Chmod(d, "link", 0o600); err == nil {
		t.Fatal("Chmod through a symlink succeeded")
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o644 {
		t.Fatalf("the symlink's target changed mode: %v", fi.Mode().Perm())
	}
}

func TestExistsDoesNotFollowSymlinks(t *testing.T) {
	root := t.TempDir()
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if ok, err := Exists(d, "f"); ok || err != nil {
		t.Fatalf("missing file: %v, %v", ok, err)
	}
	if err := os.WriteFile(filepath.Join(root, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := Exists(d, "f"); !ok || err != nil {
		t.Fatalf("present file: %v, %v", ok, err)
	}
	// A dangling symlink exists as a name; its target is never looked at.
	if err := os.Symlink("/nonexistent/target", filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	if ok, err := Exists(d, "l"); !ok || err != nil {
		t.Fatalf("dangling symlink: %v, %v", ok, err)
	}
	if _, err := Exists(d, "../f"); err == nil {
		t.Fatal("a path with a separator was accepted")
	}
}

// concurrentWriters is how many goroutines write one file at once in the atomic-write
// tests: far more than the two that once collided on a pid-named temp file.
const concurrentWriters = 32

// Writers of the same name in one process (the node plugin writes the exit file from
// several goroutines) must not share a temp file: each succeeds, the file ends as one
// writer's complete content, and no temp file is left behind.
func TestWriteFileAtomicConcurrentWriters(t *testing.T) {
	dir, err := OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	contents := make(map[string]bool, concurrentWriters)
	datas := make([][]byte, concurrentWriters)
	for i := range datas {
		// Large enough that a write interleaved with another is not one write(2) apart.
		datas[i] = []byte(strings.Repeat(fmt.Sprintf("writer %02d;", i), 4096))
		contents[string(datas[i])] = true
	}
	var wg sync.WaitGroup
	errs := make(chan error, concurrentWriters)
	start := make(chan struct{})
	for i := range datas {
		wg.Add(1)
		go func(data []byte) {
			defer wg.Done()
			<-start
			errs <- WriteFileAtomic(dir, "exit", data, 0o644)
		}(datas[i])
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent WriteFileAtomic: %v", err)
		}
	}
	got, err := os.ReadFile(filepath.Join(dir.Name(), "exit"))
	if err != nil {
		t.Fatal(err)
	}
	if !contents[string(got)] {
		t.Errorf("final content (%d bytes) is no single writer's content", len(got))
	}
	entries, err := os.ReadDir(dir.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "exit" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// A failed write (here: the name is taken by a directory, so the rename fails) removes its
// temp file, and temp files start with "." so the sidecar never takes one for a socket.
func TestWriteFileAtomicCleansUpOnError(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "exit"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "exit", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if err := WriteFileAtomic(dir, "exit", []byte("x"), 0o644); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if e.Name() != "exit" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func TestWriteFileAtomicOwnedSetsOwnerAndModeBeforeTheName(t *testing.T) {
	needs.Root(t)
	root := t.TempDir()
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	if err := WriteFileAtomicOwned(d, "token", []byte("secret"), 0o600, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(filepath.Join(root, "token"))
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 65534 || sys.Gid != 65534 || st.Mode().Perm() != 0o600 {
		t.Fatalf("token: uid %d gid %d mode %v, want 65534 65534 0600", sys.Uid, sys.Gid, st.Mode().Perm())
	}
	// A symlink planted under the name is replaced, never followed.
	outside := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(outside, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "token")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "token")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomicOwned(d, "token", []byte("new"), 0o600, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Fatalf("the host file was written through the symlink: %q", b)
	}
}

func TestOwnedDirRefusesAForeignDirectory(t *testing.T) {
	needs.Root(t)
	root := t.TempDir()
	d, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := OwnedDir(d, "creds", 0o700, 65534, 65534)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	st, _ := os.Lstat(filepath.Join(root, "creds"))
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 65534 || st.Mode().Perm() != 0o700 {
		t.Fatalf("creds: uid %d mode %v", sys.Uid, st.Mode().Perm())
	}
	// Made beforehand by another user of the pod: refused.
	if err := os.Mkdir(filepath.Join(root, "other"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, "other"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := OwnedDir(d, "other", 0o700, 65534, 65534); err == nil || !strings.Contains(err.Error(), "owned by uid 1000") {
		t.Fatalf("OwnedDir used a directory of uid 1000: %v", err)
	}
	// A symlink is not followed.
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := OwnedDir(d, "link", 0o700, 65534, 65534); err == nil {
		t.Fatal("OwnedDir followed a symlink")
	}
}
