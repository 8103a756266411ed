package sidecar

import (
	"context"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// dataSock is the hand-off socket name of the volume "data".
var dataSock = podfiles.HandoffSocketName("data")

func quietSidecar() *Sidecar {
	return newSidecar(Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// fakeOffer listens on dir/name and runs serve for each connection until the test ends.
func fakeOffer(t *testing.T, dir, name string, serve func(n int, c *net.UnixConn)) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() { // owned by the test: ends when the listener closes
		defer close(done)
		for n := 1; ; n++ {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			serve(n, c)
			c.Close()
		}
	}()
}

func sendVolume(t *testing.T, c *net.UnixConn, v *handoff.Volume) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Error(err)
		return
	}
	defer r.Close()
	defer w.Close()
	frame, _ := handoff.Encode(v)
	if _, _, err := c.WriteMsgUnix(frame, unix.UnixRights(int(w.Fd())), nil); err != nil {
		t.Error(err)
	}
}

// A node plugin that drops the first connections (it restarted mid-offer, or the frame was
// not ready) is retried until the descriptor arrives.
func TestReceiveRetriesUntilTheOfferArrives(t *testing.T) {
	dir, path := dirtest.Pinned(t)
	fakeOffer(t, path, dataSock, func(n int, c *net.UnixConn) {
		if n < 3 {
			return // closed without a frame
		}
		sendVolume(t, c, &handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "b"})
	})
	o, err := quietSidecar().receive(context.Background(), dir, dataSock)
	if err != nil {
		t.Fatalf("receive gave up: %v", err)
	}
	defer o.conn.Close()
	defer o.fuse.Close()
	if o.refused != nil || o.vol.Bucket != "b" {
		t.Fatalf("offer = %+v", o)
	}
}

// A socket that exists before anyone listens on it (inotify reports bind before listen)
// refuses connections for a while; the sidecar keeps trying past the old 3 s limit.
func TestReceiveRetriesARefusedConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 3.5 s")
	}
	dir, path := dirtest.Pinned(t)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(path, dataSock)}); err != nil {
		t.Fatal(err)
	}
	var listening atomic.Bool
	go func() { // owned by the test: one accept, bounded by the test's receive
		time.Sleep(3500 * time.Millisecond)
		if err := unix.Listen(fd, 1); err != nil {
			t.Error(err)
			return
		}
		listening.Store(true)
		f := os.NewFile(uintptr(fd), "ln")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			t.Error(err)
			return
		}
		defer ln.Close()
		c, err := ln.(*net.UnixListener).AcceptUnix()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		sendVolume(t, c, &handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "b"})
	}()
	o, err := quietSidecar().receive(context.Background(), dir, dataSock)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	o.conn.Close()
	o.fuse.Close()
	if !listening.Load() {
		t.Fatal("received before the socket listened?")
	}
}

// The offer withdrawn (socket removed) or the sidecar stopping ends the retries at once.
func TestReceiveStopsWhenWithdrawnOrStopping(t *testing.T) {
	dir, path := dirtest.Pinned(t)
	// A plain file: every connect fails with ECONNREFUSED.
	if err := os.WriteFile(filepath.Join(path, dataSock), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { _, err := quietSidecar().receive(ctx, dir, dataSock); res <- err }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-res:
		if err == nil || !strings.Contains(err.Error(), "stopping") {
			t.Fatalf("err = %v, want the sidecar stopping", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("receive did not stop with the sidecar")
	}

	go func() { _, err := quietSidecar().receive(context.Background(), dir, dataSock); res <- err }()
	time.Sleep(100 * time.Millisecond)
	if err := os.Remove(filepath.Join(path, dataSock)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if err == nil || !strings.Contains(err.Error(), "withdrawn") {
			t.Fatalf("err = %v, want the offer withdrawn", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("receive did not notice the socket was removed")
	}
}

// A refused frame is not retried: its descriptor arrived and is handed on with the reason.
func TestReceiveRefusedKeepsTheDescriptor(t *testing.T) {
	dir, path := dirtest.Pinned(t)
	var conns atomic.Int32
	fakeOffer(t, path, dataSock, func(_ int, c *net.UnixConn) {
		conns.Add(1)
		sendVolume(t, c, &handoff.Volume{Version: handoff.MaxVersion + 1, VolumeName: "data", Bucket: "b"})
	})
	o, err := quietSidecar().receive(context.Background(), dir, dataSock)
	if err != nil {
		t.Fatal(err)
	}
	defer o.conn.Close()
	defer o.fuse.Close()
	if o.refused == nil || !strings.Contains(o.refused.Error(), "version") || o.fuse == nil {
		t.Fatalf("offer = %+v, want refused with its descriptor", o)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for a refused frame, want 1", n)
	}
}

func TestCheckOffer(t *testing.T) {
	ok := &handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "b", Flags: []string{"--implicit-dirs"}}
	if err := checkOffer(dataSock, ok); err != nil {
		t.Fatal(err)
	}
	if err := checkOffer(podfiles.HandoffSocketName("other"), ok); err == nil || !strings.Contains(err.Error(), `names volume "data"`) {
		t.Fatalf("name mismatch: %v", err)
	}
	bad := *ok
	bad.Flags = []string{"--key-file=/etc/shadow"}
	if err := checkOffer(dataSock, &bad); err == nil || !strings.Contains(err.Error(), "key-file") {
		t.Fatalf("refused flag: %v", err)
	}
}

// A restarted sidecar counts the volumes its predecessor took and that are not offered again
// as failed, naming them and their buckets; a volume offered again is left to the hand-off.
func TestAdoptPredecessor(t *testing.T) {
	dir, path := dirtest.Pinned(t)
	for _, v := range []string{"gone", "again"} {
		if err := podfiles.WriteTaken(dir, v, podfiles.Taken{Bucket: "bkt-" + v, TakenAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(podfiles.At(path).HandoffDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podfiles.At(path).HandoffSocket("again"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSidecar(Config{TmpDir: path, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.adoptPredecessor(dir)
	lost := s.lostVolumes()
	if len(lost) != 1 || !strings.Contains(lost[0], "volume gone") || !strings.Contains(lost[0], `"bkt-gone"`) ||
		!strings.Contains(lost[0], "previous container") {
		t.Fatalf("lost = %q", lost)
	}
	// The node plugin mounts the lost volume again and offers it after this start: once
	// taken, it is no failure.
	s.mu.Lock()
	s.taken["gone"] = true
	s.mu.Unlock()
	if lost := s.lostVolumes(); len(lost) != 0 {
		t.Fatalf("lost = %q after the volume was taken again", lost)
	}
	// Nothing taken before: nothing failed.
	empty, _ := dirtest.Pinned(t)
	s = quietSidecar()
	s.adoptPredecessor(empty)
	if lost := s.lostVolumes(); len(lost) != 0 {
		t.Fatalf("lost = %q with no records", lost)
	}
}
