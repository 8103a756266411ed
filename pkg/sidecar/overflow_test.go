package sidecar

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/dirwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// overflowWait bounds each wait of these tests for the sidecar to act on a rescan.
const overflowWait = 5 * time.Second

// overflowRun runs a legacy sidecar on a fresh TmpDir whose watcher events are replaced by
// the returned channel: nothing the kernel reports reaches Run, as when the inotify queue
// overflows. It returns once Run is in its loop, with Run's exit code channel; the test's
// end cancels Run.
func overflowRun(t *testing.T) (tmp string, inject chan<- dirwatch.Event, code <-chan int) {
	t.Helper()
	tmp = t.TempDir()
	s := newSidecar(Config{TmpDir: tmp, Mode: contract.ModeLegacy, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	in := make(chan dirwatch.Event)
	ready := make(chan struct{})
	s.events = func(<-chan dirwatch.Event) <-chan dirwatch.Event {
		close(ready)
		return in
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan int, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		out <- s.Run(ctx, make(chan os.Signal))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ended:
		case <-time.After(overflowWait + reapTimeout + attachStopTimeout):
			t.Error("Run did not end after its context was cancelled")
		}
	})
	select {
	case <-ready:
	case <-time.After(overflowWait):
		t.Fatal("Run did not reach its loop")
	}
	return tmp, in, out
}

func sendOverflow(t *testing.T, in chan<- dirwatch.Event) {
	t.Helper()
	select {
	case in <- dirwatch.Event{Overflow: true}:
	case <-time.After(overflowWait):
		t.Fatal("Run does not read its events")
	}
}

// An exit file whose create event was lost in an overflow still ends the sidecar: the
// rescan finds it and Run acts on it as on its event.
func TestOverflowRescanFindsExitFile(t *testing.T) {
	tmp, in, code := overflowRun(t)
	dir, err := podpath.OpenDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if err := podfiles.WriteIn(dir, podfiles.Reason{Rule: "test", WrittenAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sendOverflow(t, in)
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d, want 0", c)
		}
	case <-time.After(overflowWait):
		t.Fatal("the sidecar did not act on the exit file found by the rescan")
	}
}

// A hand-off directory and a socket in it, both created with their events lost: the rescan
// starts watching the directory and takes the offer (the sidecar dials the socket).
func TestOverflowRescanFindsHandoffSockets(t *testing.T) {
	tmp, in, _ := overflowRun(t)
	if err := os.Mkdir(podfiles.At(tmp).HandoffDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: podfiles.At(tmp).HandoffSocket("data"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sendOverflow(t, in)
	if err := ln.SetDeadline(time.Now().Add(overflowWait)); err != nil {
		t.Fatal(err)
	}
	conn, err := ln.AcceptUnix()
	if err != nil {
		t.Fatalf("the sidecar did not connect to the socket found by the rescan: %v", err)
	}
	conn.Close()
}

// The rescan lists the hand-off directory first, the exit file last, and the sockets of an
// already watched hand-off directory.
func TestRescanEventsOrder(t *testing.T) {
	tmp := t.TempDir()
	hand := podfiles.At(tmp).HandoffDir()
	for _, p := range []string{hand} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{podfiles.At(tmp).ExitFile(), podfiles.At(tmp).TerminatingFile(),
		podfiles.At(tmp).HandoffSocket("a"), podfiles.At(tmp).HandoffSocket("b")} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmpDir, err := podpath.OpenDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer tmpDir.Close()
	handDir, err := podfiles.OpenHandoffDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer handDir.Close()
	s := newSidecar(Config{TmpDir: tmp, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, hd := range []*os.File{handDir, nil} {
		evs := s.rescanEvents(tmpDir, hd)
		names := map[string]bool{}
		for _, ev := range evs {
			names[ev.Dir+"/"+ev.Name] = true
		}
		if evs[0].Name != podfiles.HandoffDir || evs[len(evs)-1].Name != podfiles.ExitFile || !names[podfiles.At(tmp).TerminatingFile()] {
			t.Fatalf("rescan events %+v: want the hand-off dir first, the exit file last, the terminating file", evs)
		}
		if sockets := names[podfiles.At(tmp).HandoffSocket("a")] && names[podfiles.At(tmp).HandoffSocket("b")]; sockets != (hd != nil) {
			t.Fatalf("rescan events %+v: sockets listed %v, want %v", evs, sockets, hd != nil)
		}
	}
}

// An exit file there at start but unreadable (not a regular file, here a directory) ends
// the sidecar as a readable one does: the name is the trigger, at start as while running.
func TestUnreadableExitFileAtStartEndsTheSidecar(t *testing.T) {
	tmp := t.TempDir()
	if err := os.Mkdir(podfiles.At(tmp).ExitFile(), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSidecar(Config{TmpDir: tmp, Mode: contract.ModeLegacy, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	code := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { code <- s.Run(ctx, make(chan os.Signal)) }()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d, want 0", c)
		}
	case <-time.After(overflowWait):
		cancel()
		<-code
		t.Fatal("the sidecar kept serving with an (unreadable) exit file present at start")
	}
}
