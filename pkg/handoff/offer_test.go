package handoff

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/firstseen"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// Bounds for the tests' waits.
const (
	appearWait = 5 * time.Second
	stopWait   = 5 * time.Second
)

// otherOwner returns an owner that bind(2) would not give the socket, so that a socket seen
// with it was chowned. As root that is the sidecar's user; otherwise our uid and another of
// our groups (only root may give a file away).
func otherOwner(t *testing.T) (uid, gid int) {
	t.Helper()
	if os.Geteuid() == 0 {
		return contract.SidecarUID, contract.SidecarGID
	}
	groups, _ := os.Getgroups()
	for _, g := range groups {
		if g != os.Getegid() {
			return os.Geteuid(), g
		}
	}
	t.Skip("needs root or a supplementary group to give the socket another owner")
	return 0, 0
}

func openDir(t *testing.T, path string) *os.File {
	t.Helper()
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func fuseStandIn(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	return r
}

func hiddenNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var hidden []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			hidden = append(hidden, e.Name())
		}
	}
	return hidden
}

// A sidecar wakes on the socket's name (inotify) and connects at once: the name must never
// exist with bind's owner, or the connect fails with EACCES. Checked at the first
// appearance of the name, over several offers (each replacing a stale socket and a pending
// one left by a killed node plugin), and the renamed socket must still serve.
func TestNewOfferSocketAppearsOnlyWithTheSidecarOwner(t *testing.T) {
	uid, gid := otherOwner(t)
	const rounds = 20
	dir := t.TempDir()
	name := podfiles.HandoffSocketName("data")
	for i := range rounds {
		// Leftovers of an earlier, killed node plugin: a dead socket and a pending one.
		for _, n := range []string{name, podfiles.PendingHandoffSocketName("data")} {
			ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, n), Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}
		w, err := firstseen.Start(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		o, err := NewOffer(OfferConfig{Dir: openDir(t, dir), Volume: validVolume(), Fuse: fuseStandIn(t),
			UID: uid, GID: gid, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			peerAllowed: func(peer uint32) bool { return peer == uint32(os.Geteuid()) }}) // the test connects as itself
		if err != nil {
			w.Close()
			t.Fatal(err)
		}
		a, err := w.Wait(appearWait)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !a.MovedIn {
			t.Fatalf("round %d: %s was created under its final name (bind), so it existed with bind's owner before the chown", i, name)
		}
		if a.StatErr != nil || int(a.UID) != uid || int(a.GID) != gid {
			t.Fatalf("round %d: at its first appearance %s was owned by %d:%d (stat err %v), want %d:%d", i, name, a.UID, a.GID, a.StatErr, uid, gid)
		}
		if hidden := hiddenNames(t, dir); len(hidden) != 0 {
			t.Fatalf("round %d: hidden names left in the hand-off directory: %v", i, hidden)
		}

		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			t.Fatalf("round %d: connect to the offered socket: %v", i, err)
		}
		v, fd, err := RecvVolume(conn)
		if err != nil {
			t.Fatalf("round %d: receive the offered volume: %v", i, err)
		}
		fd.Close()
		conn.Close()
		if v.VolumeName != "data" {
			t.Fatalf("round %d: received volume %q", i, v.VolumeName)
		}
		ctx, cancel := context.WithTimeout(context.Background(), stopWait)
		err = o.Stop(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Every failure after the bind leaves nothing behind: no pending socket for the sidecar to
// trip over, and whatever held the final name untouched.
func TestNewOfferCleansUpWhenItCannotPublish(t *testing.T) {
	uid, gid := os.Geteuid(), os.Getegid()
	dir := t.TempDir()
	name := podfiles.HandoffSocketName("data")
	// A non-empty directory under the socket's name: the rename into place fails.
	if err := os.MkdirAll(filepath.Join(dir, name, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := openDir(t, dir)
	defer d.Close()
	fuse := fuseStandIn(t)
	defer fuse.Close()
	_, err := NewOffer(OfferConfig{Dir: d, Volume: validVolume(), Fuse: fuse, UID: uid, GID: gid,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		t.Fatal("NewOffer succeeded although its socket's name is taken by a directory")
	}
	if !strings.Contains(err.Error(), "publish the hand-off socket") {
		t.Fatalf("error does not say what failed: %v", err)
	}
	if hidden := hiddenNames(t, dir); len(hidden) != 0 {
		t.Fatalf("pending socket left behind after a failed offer: %v", hidden)
	}
	if _, err := os.Stat(filepath.Join(dir, name, "x")); err != nil {
		t.Fatalf("the directory holding the name was disturbed: %v", err)
	}
}

// Without the right to give the socket away (not root), the chown fails: the offer fails
// and the pending socket is removed.
func TestNewOfferCleansUpWhenItCannotChown(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may give a file to any user")
	}
	dir := t.TempDir()
	d := openDir(t, dir)
	defer d.Close()
	fuse := fuseStandIn(t)
	defer fuse.Close()
	other := os.Geteuid() + 1 // not ours to give a file to
	_, err := NewOffer(OfferConfig{Dir: d, Volume: validVolume(), Fuse: fuse, UID: other, GID: other,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		t.Fatalf("NewOffer succeeded although the socket cannot be given to uid %d", other)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("names left behind after a failed offer: %v", entries)
	}
}

// A newer sidecar may report states this node plugin does not know: the relay skips them
// and still delivers the reports that follow.
func TestOfferRelaySkipsUnknownStates(t *testing.T) {
	got := make(chan *Status, 4)
	o, conn := takenOffer(t, func(s *Status) { got <- s }, nil)
	stopAtEnd(t, o, 5*time.Second)
	defer conn.Close()
	for _, s := range []*Status{{State: "from-the-future", Message: "x"}, {State: StateTerminating}} {
		if err := SendStatus(conn, s); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case s := <-got:
		if s.State != StateTerminating {
			t.Fatalf("first relayed state = %q, want %q (the unknown one skipped)", s.State, StateTerminating)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the status after an unknown state was not relayed")
	}
}

// A process of another user than the sidecar's (here the test itself, root in CI, which
// file permissions would not stop) is refused the descriptor: its connection is closed
// without a frame, and the offer stays for the sidecar.
func TestOfferRefusesAPeerOfAnotherUser(t *testing.T) {
	uid, gid := otherOwner(t)
	if uint32(uid) == uint32(os.Geteuid()) {
		t.Skip("needs the socket to belong to another user than the test's (root)")
	}
	dir := t.TempDir()
	o, err := NewOffer(OfferConfig{Dir: openDir(t, dir), Volume: validVolume(), Fuse: fuseStandIn(t),
		UID: uid, GID: gid, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopWait)
		defer cancel()
		_ = o.Stop(ctx)
	}()
	sock := filepath.Join(dir, podfiles.HandoffSocketName("data"))
	for i := range 2 {
		conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatalf("connect %d: %v", i, err)
		}
		_ = conn.SetDeadline(time.Now().Add(appearWait))
		if v, fd, err := RecvVolume(conn); err == nil {
			fd.Close()
			t.Fatalf("connect %d: a process of uid %d got volume %q offered to uid %d", i, os.Geteuid(), v.VolumeName, uid)
		}
		conn.Close()
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("the offer is gone after refusing a stranger: %v", err)
	}
	if fi.Mode().Perm() != SocketMode {
		t.Errorf("socket mode %v, want %v (its owner alone)", fi.Mode().Perm(), os.FileMode(SocketMode))
	}
}

// releaseWait bounds the wait for the last copy of a descriptor to be closed.
const releaseWait = 5 * time.Second

// TestOfferHoldsNoDescriptorAfterTheHandOff guards the rule that once the sidecar has the
// FUSE descriptor, the node plugin's side holds no copy of it, while the offer still relays
// the sidecar's statuses: a copy kept there would keep the FUSE connection alive after
// gcsfuse died, so the pod's mount would hang instead of failing with ENOTCONN. A pipe's
// write end stands for the descriptor: once the sidecar's copy, the only one left, is
// closed, its read end sees EOF.
func TestOfferHoldsNoDescriptorAfterTheHandOff(t *testing.T) {
	tmp, err := os.MkdirTemp("", "offer") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	handedOff := make(chan struct{})
	o, err := NewOffer(OfferConfig{
		Dir: openDir(t, tmp), Volume: validVolume(), Fuse: w, UID: os.Getuid(), GID: os.Getgid(),
		OnHandedOff: func() { close(handedOff) },
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, o, stopWait)

	conn := dialData(t, tmp)
	defer conn.Close() // open until the end: the offer relays statuses meanwhile
	_ = conn.SetDeadline(time.Now().Add(releaseWait))
	_, sidecarCopy, err := RecvVolume(conn)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-handedOff:
	case <-time.After(releaseWait):
		sidecarCopy.Close()
		t.Fatal("OnHandedOff was not called after the sidecar received the descriptor")
	}
	select {
	case <-o.Done():
		t.Fatal("the offer ended at the hand-off; it must keep relaying the sidecar's statuses")
	default:
	}
	sidecarCopy.Close()
	if err := r.SetReadDeadline(time.Now().Add(releaseWait)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the hand-off the descriptor is still open outside the sidecar (read = %d, %v; want EOF): the offer kept its copy", n, err)
	}
}

// stopAtEnd stops o when the test ends, within d.
func stopAtEnd(t *testing.T, o *Offer, d time.Duration) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		if err := o.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
}

// dialData connects, as the sidecar does, to the hand-off socket of the volume "data" in
// dir.
func dialData(t *testing.T, dir string) *net.UnixConn {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(dir, podfiles.HandoffSocketName("data")), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// takenOffer is an offer of the volume "data" (relaying to onStatus and onStatusEnd) whose
// descriptor a fake sidecar has taken: the returned connection is the sidecar's side of
// the status stream. The caller stops the offer and closes the connection.
func takenOffer(t *testing.T, onStatus func(*Status), onStatusEnd func()) (*Offer, *net.UnixConn) {
	t.Helper()
	tmp, err := os.MkdirTemp("", "offer") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	dir, err := os.Open(tmp)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	o, err := NewOffer(OfferConfig{
		Dir: dir, Volume: validVolume(), Fuse: w, UID: os.Getuid(), GID: os.Getgid(),
		OnStatus: onStatus, OnStatusEnd: onStatusEnd,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := dialData(t, tmp)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, fuse, err := RecvVolume(conn)
	if err != nil {
		t.Fatal(err)
	}
	fuse.Close()
	return o, conn
}

// The end of the sidecar's status stream is told once the sidecar closes it (its gcsfuse
// ended, or the sidecar died), after the statuses it sent; never when Stop ends the offer.
func TestOfferTellsTheStatusStreamsEnd(t *testing.T) {
	start := func(t *testing.T) (*Offer, *net.UnixConn, chan string) {
		seen := make(chan string, 4)
		o, conn := takenOffer(t, func(s *Status) { seen <- s.State }, func() { seen <- "end" })
		return o, conn, seen
	}
	next := func(t *testing.T, seen chan string) string {
		t.Helper()
		select {
		case s := <-seen:
			return s
		case <-time.After(5 * time.Second):
			return "nothing"
		}
	}
	t.Run("the sidecar closes it", func(t *testing.T) {
		o, conn, seen := start(t)
		stopAtEnd(t, o, 5*time.Second)
		// A frame of another version is no end: the stream goes on.
		frame, err := Encode(&Status{Version: Version + 1, State: StateExited})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(frame); err != nil {
			t.Fatal(err)
		}
		if err := SendStatus(conn, &Status{State: StateStarted}); err != nil {
			t.Fatal(err)
		}
		conn.Close()
		if got := []string{next(t, seen), next(t, seen)}; got[0] != StateStarted || got[1] != "end" {
			t.Fatalf("relayed %q, want the status, then the end", got)
		}
	})
	t.Run("Stop ends it", func(t *testing.T) {
		o, conn, seen := start(t)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-seen:
			t.Fatalf("Stop relayed %q, want nothing", s)
		case <-time.After(200 * time.Millisecond):
		}
	})
}

// Withdraw gives back the descriptor of an offer no sidecar took (its caller answers the
// mount instead), and ErrHandedOff once the sidecar has it.
func TestWithdraw(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	allow := func(peer uint32) bool { return peer == uint32(os.Geteuid()) }
	dir := t.TempDir()
	fuse := fuseStandIn(t)
	o, err := NewOffer(OfferConfig{Dir: openDir(t, dir), Volume: validVolume(), Fuse: fuse,
		UID: os.Getuid(), GID: os.Getgid(), Log: log, peerAllowed: allow})
	if err != nil {
		t.Fatal(err)
	}
	got, err := o.Withdraw(context.Background())
	if err != nil || got != fuse {
		t.Fatalf("Withdraw of an offer not taken = %v, %v; want its descriptor", got, err)
	}
	if _, err := got.Stat(); err != nil {
		t.Errorf("the withdrawn descriptor was closed: %v", err)
	}
	got.Close()
	if _, err := os.Stat(filepath.Join(dir, podfiles.HandoffSocketName(validVolume().VolumeName))); !os.IsNotExist(err) {
		t.Errorf("the withdrawn offer's socket: %v", err)
	}

	// Taken: nothing to give back.
	dir2 := t.TempDir()
	o, err = NewOffer(OfferConfig{Dir: openDir(t, dir2), Volume: validVolume(), Fuse: fuseStandIn(t),
		UID: os.Getuid(), GID: os.Getgid(), Log: log, peerAllowed: allow})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(dir2, podfiles.HandoffSocketName(validVolume().VolumeName)), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, f, err := RecvVolume(conn)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, err := o.Withdraw(context.Background()); !errors.Is(err, ErrHandedOff) || got != nil {
		t.Fatalf("Withdraw of a taken offer = %v, %v; want ErrHandedOff", got, err)
	}
}
