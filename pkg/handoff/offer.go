package handoff

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Offer holds one volume's FUSE descriptor on a listening socket until the sidecar takes
// it, then relays the sidecar's Status frames to a callback. The node plugin owns one Offer
// per published target and stops it on unpublish.
type Offer struct {
	ln     *net.UnixListener
	dir    *os.File // the pinned hand-off directory; the socket's name lives in it
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	// withdraw asks the goroutine to give back, on withdrawn, the descriptor it still holds
	// at its end instead of closing it (Withdraw).
	withdraw  atomic.Bool
	withdrawn chan *os.File
}

// OfferConfig says what to offer and where.
type OfferConfig struct {
	// Dir is the pinned hand-off directory inside the pod's emptyDir; Offer takes ownership.
	Dir *os.File
	// Volume is sent to the sidecar with the descriptor.
	Volume *Volume
	// Fuse is the FUSE connection; Offer takes ownership and closes its copy after hand-off.
	Fuse *os.File
	// UID and GID own the socket file. A process connecting as another user is refused
	// (its credentials checked with SO_PEERCRED), root included: any container of the pod
	// that mounts its gcsfuse-tmp volume can reach the socket, and one running as root
	// would pass the file's permissions; only the sidecar may get the FUSE descriptor.
	UID, GID int
	// OnHandedOff, if set, is called once the sidecar has the descriptor.
	OnHandedOff func()
	// OnStatus receives each Status the sidecar sends (called from the Offer's goroutine).
	OnStatus func(*Status)
	// OnStatusEnd, if set, is called once the sidecar's status stream ends by the sidecar's
	// side (it closed the connection: its gcsfuse ended, or the sidecar itself exited, was
	// killed or crashed), never when Stop ended it. After the last OnStatus, from the same
	// goroutine: a caller that saw no end state among the statuses knows its gcsfuse ended
	// without a word.
	OnStatusEnd func()
	Log         *slog.Logger

	// peerAllowed replaces the check that a peer runs as UID (tests, which connect as
	// themselves).
	peerAllowed func(uid uint32) bool
}

// SocketMode is the hand-off socket's mode: its owner, the sidecar's user, alone.
const SocketMode = 0o600

// NewOffer binds the volume's socket inside cfg.Dir and starts serving it.
//
// The socket appears under its final name only once it belongs to cfg.UID/cfg.GID: bind(2)
// creates the file owned by us (root), and a sidecar that found it before the chown would be
// refused (EACCES) and could give up on the volume. So it is bound under a hidden name,
// chowned there, and renamed into place, all relative to the pinned directory. The rename
// also replaces, atomically, a stale socket left by an earlier publish or node plugin.
func NewOffer(cfg OfferConfig) (*Offer, error) {
	name := podfiles.HandoffSocketName(cfg.Volume.VolumeName)
	pending := podfiles.PendingHandoffSocketName(cfg.Volume.VolumeName)
	if err := podpath.Remove(cfg.Dir, pending); err != nil { // left by a node plugin killed mid-offer
		return nil, fmt.Errorf("remove leftover hand-off socket: %w", err)
	}
	addr := &net.UnixAddr{Name: podpath.ProcPath(cfg.Dir, pending), Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on hand-off socket %s/%s: %w", cfg.Dir.Name(), pending, err)
	}
	ln.SetUnlinkOnClose(false) // the path goes through /proc/self/fd; we unlink by dir fd
	// abandon undoes the bind; the pending name is ours alone, so removing it is safe.
	abandon := func(cause error) (*Offer, error) {
		ln.Close()
		if err := podpath.Remove(cfg.Dir, pending); err != nil {
			cause = errors.Join(cause, fmt.Errorf("remove pending hand-off socket: %w", err))
		}
		return nil, cause
	}
	if err := podpath.Chown(cfg.Dir, pending, cfg.UID, cfg.GID); err != nil {
		return abandon(fmt.Errorf("give the hand-off socket to the sidecar's user: %w", err))
	}
	// bind(2) gives the socket the umask's mode; only its owner, the sidecar's user, may
	// connect, whatever the node plugin's umask (the peer's uid is checked too, in serve).
	if err := podpath.Chmod(cfg.Dir, pending, SocketMode); err != nil {
		return abandon(fmt.Errorf("restrict the hand-off socket to the sidecar's user: %w", err))
	}
	if err := podpath.Rename(cfg.Dir, pending, name); err != nil {
		return abandon(fmt.Errorf("publish the hand-off socket: %w", err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &Offer{ln: ln, dir: cfg.Dir, name: name, cancel: cancel, done: make(chan struct{}), withdrawn: make(chan *os.File, 1)}
	go o.serve(ctx, cfg)
	return o, nil
}

// Stop closes the listener and any open connection, waits for the goroutine (bounded by
// ctx), removes the socket and closes the directory. Safe to call more than once.
func (o *Offer) Stop(ctx context.Context) error {
	o.cancel()
	o.ln.Close()
	var err error
	select {
	case <-o.done:
	case <-ctx.Done():
		err = fmt.Errorf("hand-off for %s did not stop: %w", o.name, ctx.Err())
	}
	return err
}

// ErrHandedOff means Withdraw found the descriptor with the sidecar already.
var ErrHandedOff = errors.New("the descriptor was handed off already")

// Withdraw stops the offer as Stop does and returns the FUSE descriptor it still held, now
// the caller's: a mount whose sidecar will never come can then be answered by its caller
// instead of dying with the descriptor's close. ErrHandedOff when the sidecar has it.
func (o *Offer) Withdraw(ctx context.Context) (*os.File, error) {
	o.withdraw.Store(true)
	if err := o.Stop(ctx); err != nil {
		return nil, err
	}
	select {
	case f := <-o.withdrawn:
		return f, nil
	default:
		return nil, ErrHandedOff
	}
}

// Done is closed when the offer's goroutine has ended.
func (o *Offer) Done() <-chan struct{} { return o.done }

func (o *Offer) serve(ctx context.Context, cfg OfferConfig) {
	log := cfg.Log.With("volume", cfg.Volume.VolumeName)
	fuse := cfg.Fuse
	// removed: the socket is gone already (at the hand-off). Its name may be a new offer's
	// by the end (OnStatusEnd can offer the volume again), which this one must not remove.
	removed := false
	defer func() {
		if fuse != nil {
			if o.withdraw.Load() {
				o.withdrawn <- fuse // buffered: the one send of this goroutine
			} else {
				fuse.Close()
			}
		}
		o.ln.Close()
		if !removed {
			o.removeSocket(log)
		}
		o.dir.Close()
		close(o.done)
	}()
	for {
		conn, err := o.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				log.Error("hand-off accept failed", "err", err)
			}
			return
		}
		peer, uid, known := peerCred(conn)
		allowed := known && uid == uint32(cfg.UID)
		if cfg.peerAllowed != nil {
			allowed = known && cfg.peerAllowed(uid)
		}
		if !allowed {
			log.Warn("refused a hand-off connection from a process that is not the sidecar's user", "peer", peer, "sidecarUID", cfg.UID)
			conn.Close()
			continue
		}
		if err := o.send(ctx, conn, cfg.Volume, fuse); err != nil {
			log.Warn("hand-off to sidecar failed; waiting for another connection", "peer", peer, "err", err)
			conn.Close()
			continue
		}
		// The sidecar has its own copy now; ours would keep a dead mount alive.
		fuse.Close()
		fuse = nil
		log.Info("handed FUSE descriptor to sidecar", "peer", peer)
		if cfg.OnHandedOff != nil {
			cfg.OnHandedOff()
		}
		o.ln.Close()
		o.removeSocket(log)
		removed = true
		o.relay(ctx, conn, cfg.OnStatus, log)
		if ctx.Err() == nil && cfg.OnStatusEnd != nil {
			cfg.OnStatusEnd()
		}
		return
	}
}

// removeSocket removes the offer's socket. One left behind would have a restarted sidecar
// knock on a listener that is gone (it retries, then reports the volume failed), so a
// failure is worth a line; the socket being gone already is not.
func (o *Offer) removeSocket(log *slog.Logger) {
	if err := podpath.Remove(o.dir, o.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("cannot remove the hand-off socket", "socket", o.name, "err", err)
	}
}

func (o *Offer) send(ctx context.Context, conn *net.UnixConn, v *Volume, fuse *os.File) error {
	if err := conn.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	return SendVolume(conn, v, int(fuse.Fd()))
}

// relay forwards Status frames until the sidecar closes the connection or Stop is called.
// A frame this build does not take (ErrBadStatus: a state it does not know, another
// version) is skipped, not an end: a newer sidecar must not lose its later reports to an
// older node plugin, nor have its mounts taken for dead (OnStatusEnd).
func (o *Offer) relay(ctx context.Context, conn *net.UnixConn, onStatus func(*Status), log *slog.Logger) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	for {
		s, err := RecvStatus(conn)
		if errors.Is(err, ErrBadStatus) {
			// Not an end: a newer sidecar's frame (another state or version) was read whole.
			log.Debug("sidecar sent a status this node plugin does not take; skipped", "err", err)
			continue
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				log.Debug("sidecar status stream ended", "err", err)
			}
			return
		}
		if onStatus != nil {
			onStatus(s)
		}
	}
}

// peerCred describes the connecting process (for logs) and returns its uid; known is false
// when the kernel could not tell, which is refused like a wrong uid.
func peerCred(conn *net.UnixConn) (desc string, uid uint32, known bool) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return "unknown", 0, false
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cred == nil {
		return "unknown", 0, false
	}
	return fmt.Sprintf("pid=%d uid=%d", cred.Pid, cred.Uid), cred.Uid, true
}
