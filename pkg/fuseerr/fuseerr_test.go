package fuseerr

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
)

func mount(t *testing.T) (string, *os.File) {
	t.Helper()
	needs.RootAndFUSE(t)
	target := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fusemount.Mount(target, fusemount.Options{Source: "failed", UserID: 0, GroupID: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = fusemount.Unmount(ctx, target, 100*time.Millisecond)
	})
	pollable, err := Pollable(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pollable.Close() })
	return target, pollable
}

// The mount point stats as a directory (so a container can be created on it) and every
// access inside fails with EIO; an unmount ends Serve.
func TestServeFailsAccessButNotTheMountPoint(t *testing.T) {
	target, f := mount(t)
	done := make(chan error, 1)
	go func() { done <- Serve(f, 2*time.Second, nil) }()

	statDone := make(chan struct{})
	var st os.FileInfo
	var err error
	go func() { st, err = os.Stat(target); close(statDone) }()
	select {
	case <-statDone:
	case <-time.After(5 * time.Second):
		t.Fatal("stat of the mount point hangs: Serve did not answer")
	}
	if err != nil || !st.IsDir() {
		t.Fatalf("stat of the mount point = %v, %v; want a directory", st, err)
	}
	if _, err := os.ReadDir(target); !errors.Is(err, syscall.EIO) {
		t.Fatalf("readdir: %v, want EIO", err)
	}
	if err := os.WriteFile(filepath.Join(target, "out.txt"), []byte("x"), 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("create: %v, want EIO", err)
	}
	if _, err := os.Stat(filepath.Join(target, "in.txt")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("stat inside: %v, want EIO", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := fusemount.Unmount(ctx, target, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after unmount: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not end after unmount")
	}
}

// When another server already read INIT, Serve gives up instead of leaving the mount hung.
func TestServeRefusesWhenInitTaken(t *testing.T) {
	_, f := mount(t)
	buf := make([]byte, bufferSize)
	if _, err := f.Read(buf); err != nil { // plays gcsfuse reading INIT and dying
		t.Fatal(err)
	}
	start := time.Now()
	if err := Serve(f, 300*time.Millisecond, nil); !errors.Is(err, ErrInitTaken) {
		t.Fatalf("Serve = %v, want ErrInitTaken", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatal("Serve waited far past its INIT deadline")
	}
}
