package fuseerr

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"golang.org/x/sys/unix"
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
	unmountEnds(t, target, done)
}

// unmountEnds unmounts target and checks that its server (done) then ends without error.
func unmountEnds(t *testing.T, target string, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := fusemount.Unmount(ctx, target, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the server after unmount: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not end after unmount")
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

// A server that answered INIT, read a request and died without answering it (gcsfuse killed
// mid-read): after TakeOver, ServeEIO answers that request too, so its caller gets EIO
// instead of waiting forever; later requests get EIO as well.
func TestTakeOverAnswersTheDeadServersRequests(t *testing.T) {
	target, f := mount(t)
	buf := make([]byte, bufferSize)
	// The dead server: answers INIT, then reads the app's first request and never answers.
	n, err := f.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(initReply(binary.LittleEndian.Uint64(buf[8:16]), buf[inHeaderSize:n])); err != nil {
		t.Fatal(err)
	}
	app := make(chan error, 1)
	go func() { _, err := os.ReadDir(target); app <- err }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_ = f.SetReadDeadline(deadline)
		_, err = f.Read(buf)
		if err != nil {
			t.Fatalf("the app's request never came: %v", err)
		}
		if op := binary.LittleEndian.Uint32(buf[4:8]); op != opForget && op != opBatchForget && op != opInterrupt {
			break // read, and left unanswered
		}
	}
	_ = f.SetReadDeadline(time.Time{})
	select {
	case err := <-app:
		t.Fatalf("the app's call returned (%v) before anyone answered it", err)
	case <-time.After(200 * time.Millisecond):
	}

	err = TakeOver(f)
	if errors.Is(err, ErrNoResend) && !kernelAtLeast(t, 6, 9) {
		t.Logf("kernel before 6.9: %v (the caller closes the connection instead; ENOTCONN)", err)
		return
	}
	if err != nil {
		t.Fatalf("TakeOver: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- ServeEIO(f) }()
	select {
	case err := <-app:
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("the request the dead server had read ended with %v, want EIO", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request the dead server had read is still waiting after TakeOver")
	}
	if err := os.WriteFile(filepath.Join(target, "later.txt"), []byte("x"), 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a later create: %v, want EIO", err)
	}
	unmountEnds(t, target, done)
}

// kernelAtLeast reports whether the running kernel is major.minor or newer.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", unix.ByteSliceToString(u.Release[:]), err)
	}
	return ma > major || ma == major && mi >= minor
}
