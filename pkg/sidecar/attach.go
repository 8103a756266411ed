package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/backoff"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Hand-off retries. inotify reports a socket at bind(2), before listen(2) (ECONNREFUSED) and
// before the node plugin's chown (EACCES); a node plugin that restarts mid-offer drops the
// connection. All of these pass, so every failure to connect or receive is retried while the
// socket exists. The first delay is short because the bind-to-listen race lasts microseconds
// and the app waits on the mount meanwhile; the cap keeps a slow case from spinning.
const (
	attachBackoffMin = 10 * time.Millisecond
	attachBackoffMax = 2 * time.Second
	// attachGiveUp ends the retries of one socket; a socket created again later (a new
	// offer) starts over.
	attachGiveUp = 60 * time.Second
	// handoffRecvTimeout bounds the wait for the Volume frame once connected: the node
	// plugin sends it right after accept.
	handoffRecvTimeout = 5 * time.Second
	// statusWriteTimeout bounds each Status write: a node plugin that stopped reading must
	// not block a volume's reaper or the drain.
	statusWriteTimeout = time.Second
)

// offered is what one connection to a hand-off socket delivered.
type offered struct {
	vol  *handoff.Volume // nil when a refused frame did not decode
	fuse *os.File
	conn *net.UnixConn
	// refused is why the volume cannot be served; fuse and conn are still valid, so the
	// node plugin can be told and the mount answered.
	refused error
}

// attach takes the offer on a hand-off socket in the background. A socket already being
// taken, or whose volume is served, is ignored.
func (s *Sidecar) attach(ctx context.Context, dir *os.File, name string) {
	vname, err := podfiles.HandoffSocketVolume(name)
	if errors.Is(err, podfiles.ErrNotHandoffSocket) {
		return
	}
	if err != nil {
		s.log.Warn("ignoring a hand-off socket whose name is not a volume name", "socket", name)
		return
	}
	s.mu.Lock()
	select {
	case <-s.stopped:
		s.mu.Unlock()
		return
	default:
	}
	if s.pending[vname] || s.volumes[vname] != nil {
		s.mu.Unlock()
		return
	}
	if s.draining && s.cfg.Mode == contract.ModeShared {
		// The node's mounter is stopping: a mount taken now would end with it. Left on its
		// socket, the node plugin's publish fails (Unavailable, the kubelet retries it) and
		// the next mounter takes the retry's offer.
		s.mu.Unlock()
		s.log.Warn("the mounter is stopping; not taking a new shared mount", "volume", vname)
		return
	}
	s.pending[vname] = true
	s.attaching.Add(1) // under mu, before shutdown can close stopped and wait
	s.mu.Unlock()
	go func() { // owned by s: bounded by attachGiveUp and ended by ctx; shutdown waits for it
		defer s.attaching.Done()
		defer func() {
			s.mu.Lock()
			delete(s.pending, vname)
			s.mu.Unlock()
		}()
		s.take(ctx, dir, name, vname)
	}()
}

// take receives one volume's descriptor and serves it: with gcsfuse, or with I/O errors when
// the hand-off is refused or gcsfuse cannot start.
func (s *Sidecar) take(ctx context.Context, dir *os.File, sockName, vname string) {
	o, err := s.receive(ctx, dir, sockName)
	if err != nil {
		return // logged by receive
	}
	received := time.Now()
	bucket := ""
	if o.vol != nil {
		bucket = o.vol.Bucket
	}
	// From here this container holds the mount: if it dies, a restarted one must know.
	if err := podfiles.WriteTaken(s.tmp, vname, podfiles.Taken{Bucket: bucket, TakenAt: received}); err != nil {
		s.log.Warn("cannot record the taken volume; a restarted sidecar would not report it", "volume", vname, "err", err)
	}
	if o.refused == nil {
		o.refused = checkOffer(sockName, o.vol)
	}
	if o.refused != nil {
		reason := o.refused.Error()
		s.log.Error("hand-off refused; answering the mount with I/O errors", "volume", vname, "bucket", bucket, "reason", reason)
		if err := sendStatus(o.conn, &handoff.Status{State: handoff.StateRefused, Message: reason, ElapsedMillis: time.Since(received).Milliseconds()}); err != nil {
			s.log.Debug("could not report the refusal to the node plugin", "volume", vname, "err", err)
		}
		o.conn.Close()
		s.report(exitResult{Volume: vname, Bucket: bucket, Reason: reason, Spare: o.fuse})
		return
	}
	vol, err := s.start(ctx, o.vol, o.fuse, o.conn, received)
	if err != nil {
		reason := "gcsfuse not started: " + err.Error()
		if err := sendStatus(o.conn, &handoff.Status{State: handoff.StateFailed, Message: reason, ElapsedMillis: time.Since(received).Milliseconds()}); err != nil {
			s.log.Debug("could not report the failure to the node plugin", "volume", vname, "err", err)
		}
		o.conn.Close()
		s.report(exitResult{Volume: vname, Bucket: bucket, Reason: reason, Spare: o.fuse})
		return
	}
	s.mu.Lock()
	s.volumes[vname] = vol
	s.taken[vname] = true
	draining := s.draining
	s.mu.Unlock()
	select {
	case <-s.stopped: // shutdown began while we were starting
		s.stopVolume(vol, "the sidecar is stopping")
	default:
		if draining {
			vol.notifyTerminating()
		}
	}
	go func() { // owned by vol: forwards its end to Run (report gives up once shutdown began)
		<-vol.exited
		s.report(vol.result)
	}()
}

// receive connects to a hand-off socket and takes the volume's descriptor, retrying every
// failure that leaves no descriptor with a capped exponential backoff, for as long as the
// socket exists, the sidecar is not stopping and attachGiveUp has not passed. Each distinct
// failure is logged once.
func (s *Sidecar) receive(ctx context.Context, dir *os.File, sockName string) (offered, error) {
	log := s.log.With("socket", sockName)
	giveUp := time.Now().Add(attachGiveUp)
	pace := backoff.Doubling(attachBackoffMin, attachBackoffMax)
	seen := map[string]bool{}
	for attempt := 1; ; attempt++ {
		o, err := receiveOnce(ctx, dir, sockName)
		if err == nil {
			if attempt > 1 {
				log.Info("hand-off taken after retries", "attempts", attempt)
			}
			return o, nil
		}
		if ctx.Err() != nil {
			return offered{}, fmt.Errorf("sidecar stopping: %w", err)
		}
		if ok, serr := podpath.Exists(dir, sockName); serr == nil && !ok {
			log.Info("hand-off socket removed: the offer was withdrawn", "lastErr", err)
			return offered{}, fmt.Errorf("offer withdrawn: %w", err)
		}
		if time.Now().After(giveUp) {
			log.Error("giving up on the hand-off socket; a new offer for the volume starts over", "attempts", attempt, "after", attachGiveUp.String(), "err", err)
			return offered{}, fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		if msg := err.Error(); !seen[msg] {
			seen[msg] = true
			log.Warn("cannot take the hand-off yet; retrying", "err", err, "attempt", attempt)
		}
		t := time.NewTimer(pace.Step())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return offered{}, fmt.Errorf("sidecar stopping: %w", ctx.Err())
		}
	}
}

// receiveOnce makes one attempt. An error means no descriptor arrived (retry); a refused
// frame whose descriptor arrived is a success with o.refused set.
func receiveOnce(ctx context.Context, dir *os.File, sockName string) (offered, error) {
	addr := &net.UnixAddr{Name: podpath.ProcPath(dir, sockName), Net: "unix"}
	conn, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		return offered{}, fmt.Errorf("connect to hand-off socket %s: %w", sockName, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := conn.SetReadDeadline(time.Now().Add(handoffRecvTimeout)); err != nil {
		conn.Close()
		return offered{}, fmt.Errorf("hand-off socket %s: %w", sockName, err)
	}
	v, fuse, err := handoff.RecvVolume(conn)
	if err != nil && fuse == nil {
		conn.Close()
		return offered{}, fmt.Errorf("receive hand-off on %s: %w", sockName, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return offered{vol: v, fuse: fuse, conn: conn, refused: err}, nil
}

// checkOffer refuses a decoded volume that does not belong on its socket or whose flags do
// not pass the allowlist.
func checkOffer(sockName string, v *handoff.Volume) error {
	if podfiles.HandoffSocketName(v.VolumeName) != sockName {
		return fmt.Errorf("hand-off refused: the offer on %s names volume %q", sockName, v.VolumeName)
	}
	// The node plugin already applied the allowlist; apply it again so that nothing else
	// that can write into this emptyDir can smuggle a flag into gcsfuse.
	return recheckFlags(v.Flags)
}

func recheckFlags(flags []string) error {
	opts := make([]string, 0, len(flags))
	for _, f := range flags {
		if !strings.HasPrefix(f, "--") {
			return fmt.Errorf("hand-off flag %q is not a --flag", f)
		}
		opts = append(opts, strings.TrimPrefix(f, "--"))
	}
	res, err := mountopts.Parse(opts)
	if err != nil {
		return fmt.Errorf("hand-off flags refused: %w", err)
	}
	if len(res.Flags) != len(flags) {
		return errors.New("hand-off flags carry kernel options")
	}
	return nil
}

// sendStatus writes one Status frame, bounded by statusWriteTimeout. The node plugin only
// turns it into an Event, so a failure is not worth more than the caller's own report.
func sendStatus(conn *net.UnixConn, st *handoff.Status) error {
	if err := conn.SetWriteDeadline(time.Now().Add(statusWriteTimeout)); err != nil {
		return fmt.Errorf("status %s: %w", st.State, err)
	}
	if err := handoff.SendStatus(conn, st); err != nil {
		return fmt.Errorf("status %s: %w", st.State, err)
	}
	return nil
}
