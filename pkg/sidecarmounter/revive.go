package sidecarmounter

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fuseerr"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// A sidecar that dies without a word (SIGKILL, its container OOM-killed, a crash) takes its
// volumes' FUSE connections with it: the node plugin closed its own descriptor at the
// hand-off, so the mounts answer ENOTCONN, even to a stat of the mount point. A container
// that already bound such a mount fails on its next access, loudly. But a container not
// created yet never is: containerd stats each mount source to create a container, and the
// kubelet retries the CreateContainerError for ever, so the pod hangs (the chaos soak's one
// hang). So when a sidecar's status stream ends without a word, the node plugin mounts the
// target again, on top of the dead mount (never unmount first: a container created in
// between would bind the bare directory and write to the node's disk), and:
//   - offers the new connection to the sidecar the kubelet restarts (a native sidecar, or a
//     legacy one in a pod whose restartPolicy is not Never): the pod carries on, and a
//     VolumeRemounted Event says what happened once the restarted sidecar has it;
//   - answers it with I/O errors when no sidecar will come back (a legacy sidecar of a
//     restartPolicy: Never pod, or a target revived maxRevives times already): the app
//     starts, fails on its first access, and the pod ends, with a VolumeLost Event.
// Never for a pod that is stopping or done, or whose sidecar was told to exit.

// maxRevives bounds the new connections offered for one target within reviveWindow, so that
// a sidecar that dies at every start (an OOM at gcsfuse's start-up) is not fed for ever:
// past it the target is answered with I/O errors. A sidecar of a long-lived pod that dies
// once in a while is mounted again each time.
const (
	maxRevives   = 3
	reviveWindow = 10 * time.Minute
)

// maxEIOServers bounds the connections the node plugin answers with I/O errors itself (64
// KiB and a goroutine each, in the node plugin's memory): past it a dead target stays dead.
const maxEIOServers = 256

// maxProbes bounds the statfs probes (each a process, fusemount.Dead) running at once for
// revivals: a pod of many volumes whose sidecar dies probes them in turn.
const maxProbes = 2

// reviveTimeout bounds one revival: the wait for the mount to die, for the target's lock,
// the mount and the offer.
const reviveTimeout = 30 * time.Second

// reviveDeadWait bounds the wait for a mount to answer ENOTCONN after its sidecar's stream
// ended (its gcsfuse, killed with the container, may outlive the sidecar's process by a
// moment), probed every reviveDeadRetry; a mount that still answers then is left alone.
const (
	reviveDeadWait  = 5 * time.Second
	reviveDeadRetry = 250 * time.Millisecond
)

// reviveLockWait bounds the wait for a target's lock held by another call, within
// reviveTimeout.
const reviveLockWait = 10 * time.Second

// republishReviveTimeout bounds a republish's probe and revival: the kubelet's call holds
// the target's lock meanwhile.
const republishReviveTimeout = 15 * time.Second

// republishProbeEvery bounds the probes of a live target published before the node
// plugin's start: one per republish would be a process per volume per minute.
const republishProbeEvery = 5 * time.Minute

// untakenTimeout bounds SidecarEnded's work on one target (the pod watch waits for it).
const untakenTimeout = 3 * time.Second

// reviveLockRetry paces the attempts to take a target's lock from another call.
const reviveLockRetry = 100 * time.Millisecond

// eioInitWait bounds the wait for the kernel's INIT on a connection answered with I/O
// errors: a new mount's INIT is queued at the mount, so it is there at once.
const eioInitWait = 5 * time.Second

// eioStopWait bounds the wait for such a connection's server at the target's unpublish.
const eioStopWait = 2 * time.Second

// streamSeen records what a sidecar reported on one volume's status stream: a stream that
// ends after an end state (its gcsfuse failed or exited: the live sidecar answers the mount
// itself; or the sidecar stopped it on purpose) or a drain (the pod is stopping) is no
// sidecar's death.
type streamSeen struct{ ended, draining atomic.Bool }

func (s *streamSeen) saw(st *handoff.Status) {
	switch st.State {
	case handoff.StateExited, handoff.StateFailed, handoff.StateRefused, handoff.StateStopping:
		s.ended.Store(true)
	case handoff.StateTerminating:
		s.draining.Store(true)
	}
}

// revivals is what the mounter keeps of its revived targets: when each was mounted again
// (within reviveWindow), and the connections it answers with I/O errors itself; probes
// bounds the statfs probes running at once.
type revivals struct {
	mu     sync.Mutex
	times  map[string][]time.Time
	eio    map[string]*eioServer
	probes chan struct{}
	// pending are the offers no sidecar took yet, by target (SidecarEnded).
	pending map[string]*offerRecord
	// probed is when a republish last probed a target this process did not publish.
	probed map[string]time.Time
}

// eioServer is a connection the node plugin answers with I/O errors (pkg/fuseerr) until its
// mount is gone.
type eioServer struct {
	fuse *os.File
	done chan struct{}
}

// reviveAction is what a dead target gets.
type reviveAction int

const (
	reviveNone  reviveAction = iota
	reviveOffer              // mounted again and offered to the restarted sidecar
	reviveEIO                // mounted again and answered with I/O errors
)

// decideRevive says what a target whose sidecar ended without a word gets, and why, from
// its pod (known: in the node plugin's cache), whether the sidecar was told to exit, how
// many times the target was revived within reviveWindow, and how many mounts are stacked at
// it (each revival adds one: past maxRecoverDepth it gets no more).
func decideRevive(pod *corev1.Pod, known, exitFile bool, revived, depth int) (reviveAction, string) {
	switch {
	case !known || pod == nil:
		return reviveNone, "the pod is not known to the node plugin (no API access, or not in its cache)"
	case pod.DeletionTimestamp != nil:
		return reviveNone, "the pod is being deleted"
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return reviveNone, "the pod has ended"
	case exitFile:
		return reviveNone, "the sidecar was told to exit (the workload is done)"
	}
	// The API's view, for a sidecar that predates StateStopping and was stopped by the
	// kubelet before the exit file (a native pod's end).
	if d := lifecycle.Decide(pod); d.Done {
		return reviveNone, "the workload is done: " + d.Reason
	}
	restarts, ok := sidecarRestarts(pod)
	if !ok {
		return reviveNone, "the pod has no " + contract.SidecarContainerName + " container"
	}
	switch {
	case depth >= maxRecoverDepth:
		return reviveEIO, fmt.Sprintf("%d dead mounts are stacked at its target already", depth)
	case revived >= maxRevives:
		return reviveEIO, fmt.Sprintf("mounted again %d times already, and its sidecar died each time", revived)
	case !restarts:
		return reviveEIO, "its legacy sidecar is not restarted (restartPolicy: Never)"
	}
	return reviveOffer, "the kubelet restarts its sidecar"
}

// sidecarRestarts says whether the kubelet restarts pod's sidecar when it ends: a native one
// always, a legacy one unless the pod's restartPolicy is Never; ok is false for a pod
// without our sidecar.
func sidecarRestarts(pod *corev1.Pod) (restarts, ok bool) {
	switch lifecycle.SidecarMode(pod) {
	case contract.ModeNative:
		return true, true
	case contract.ModeLegacy:
		return pod.Spec.RestartPolicy != corev1.RestartPolicyNever, true
	}
	return false, false
}

// sidecarGone is an offer's OnStatusEnd: the sidecar that took rec's volume closed its
// status stream. seen says what it reported before.
func (m *Mounter) sidecarGone(rec *offerRecord, seen *streamSeen, log *slog.Logger) {
	if seen.ended.Load() || seen.draining.Load() {
		return
	}
	// The ends a pod expects (told to exit, deleted, ended) are let be before any probe.
	if action, why := m.reviveFor(rec, 0, log); action == reviveNone {
		log.Debug("the sidecar's status stream ended; its volume is not mounted again", "why", why)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), reviveTimeout)
	defer cancel()
	// The stream ends with the sidecar's process; its gcsfuse, killed with the container,
	// may hold the connection a moment longer.
	if !m.waitDead(ctx, rec.Target, log) {
		log.Info("the sidecar's status stream ended, but its mount still answers; not mounted again")
		return
	}
	// Under the target's lock: an unpublish that has it wins (the publication is gone when
	// it releases it), and one that comes later unmounts every layer. Another call holds it
	// for moments (the kubelet's republish with a fresh token, every minute or so): waited
	// for, bounded.
	lockCtx, cancelLock := context.WithTimeout(ctx, reviveLockWait)
	end := m.lockForRevive(lockCtx, rec.Target)
	cancelLock()
	if end == nil {
		if _, ok := m.cfg.Store.Publication(rec.Target); ok {
			log.Warn("sidecar ended; the target stayed busy with other calls, not mounted again", "waited", reviveLockWait.String())
		}
		return // else unpublished meanwhile
	}
	defer end()
	if _, ok := m.cfg.Store.Publication(rec.Target); !ok {
		return // unpublished meanwhile
	}
	if dead, err := m.probe(ctx, rec.Target); err != nil || !dead {
		log.Info("the sidecar's mount answers again; not mounted again", "err", err)
		return
	}
	m.revived.mu.Lock()
	n := len(recent(m.revived.times[rec.Target], time.Now()))
	m.revived.mu.Unlock()
	action, why := m.reviveFor(rec, n, log) // again: the pod may have changed meanwhile
	m.revive(ctx, rec, action, why, n, log)
}

// revive does what decideRevive said for rec's dead target, under the target's lock: mount
// it again on top and offer it, or answer it with I/O errors; n is how many times it was
// revived within reviveWindow.
func (m *Mounter) revive(ctx context.Context, rec *offerRecord, action reviveAction, why string, n int, log *slog.Logger) bool {
	// The offer made here keeps log: its own revival adds its own why.
	rlog := log.With("why", why, "revived", n)
	vol := rec.Volume.VolumeName
	switch action {
	case reviveNone:
		rlog.Warn("the sidecar ended without a word; its mount answers ENOTCONN and is not mounted again")
		return false
	case reviveOffer:
		taken := func() {
			rlog.Info("the restarted sidecar took the volume mounted again")
			nodevolume.PodEventTo(m.cfg.Events, rec.Pod, true, contract.EventVolumeRemounted, fmt.Sprintf(
				"volume %s (bucket %s): %s ended without a word (killed, OOM-killed or crashed), and gcsfuse with it; mounted again, and the restarted sidecar serves it (containers that used the volume before see ENOTCONN)",
				vol, rec.Volume.Bucket, contract.SidecarContainerName))
		}
		if err := m.mountAndOffer(ctx, rec, taken, log); err != nil {
			rlog.Error("the sidecar ended without a word; cannot offer its volume again; answering it with I/O errors", "err", err)
			why = "it could not be offered again: " + err.Error()
			action = reviveEIO
			break
		}
		rlog.Warn("the sidecar ended without a word; volume mounted again and offered to its restart")
	}
	if action == reviveEIO {
		if err := m.serveEIO(rec); err != nil {
			rlog.Error("the sidecar ended without a word; cannot answer its volume with I/O errors", "err", err)
			return false
		}
		rlog.Warn("the sidecar ended without a word; volume mounted again and answered with I/O errors, so that the pod's containers start and fail instead of hanging")
		nodevolume.PodEventTo(m.cfg.Events, rec.Pod, true, contract.EventVolumeLost, fmt.Sprintf(
			"volume %s (bucket %s): %s ended without a word (killed, OOM-killed or crashed), and gcsfuse with it; %s: the volume answers I/O errors",
			vol, rec.Volume.Bucket, contract.SidecarContainerName, why))
	}
	m.revived.mu.Lock()
	m.revived.times[rec.Target] = append(recent(m.revived.times[rec.Target], time.Now()), time.Now())
	m.revived.mu.Unlock()
	return true
}

// republishProbeDue says whether target, not published by this process, may be probed at
// this republish: at most once per republishProbeEvery. Asked before anything else, since
// the kubelet republishes every volume every minute.
func (m *Mounter) republishProbeDue(target string) bool {
	m.revived.mu.Lock()
	defer m.revived.mu.Unlock()
	last, seen := m.revived.probed[target]
	return !seen || time.Since(last) >= republishProbeEvery
}

// reviveAtRepublish is the kubelet's republish of a target this process did not publish
// (published before the node plugin's latest start), under the target's lock. A sidecar that
// died while the node plugin was down left no status stream to end: its dead mount is found
// here instead (the kubelet republishes a volume it cannot set up every few seconds, and
// every volume of a driver with requiresRepublish every minute), at most once per
// republishProbeEvery per target, and revived as at a stream's end. A live one is left alone.
func (m *Mounter) reviveAtRepublish(ctx context.Context, rec *offerRecord, log *slog.Logger) {
	m.revived.mu.Lock()
	n := len(recent(m.revived.times[rec.Target], time.Now()))
	m.revived.mu.Unlock()
	// The pod first, as at a stream's end: an ended or deleted pod costs no probe, and one
	// the node plugin's cache does not show yet (just started) is asked again next time.
	if action, _ := m.reviveFor(rec, n, log); action == reviveNone {
		return
	}
	// Bounded under the kubelet's call, which holds the target's lock.
	ctx, cancel := context.WithTimeout(ctx, republishReviveTimeout)
	defer cancel()
	dead, err := m.probe(ctx, rec.Target)
	if err != nil {
		log.Warn("cannot probe a volume published before the node plugin's start", "err", err)
		return
	}
	m.revived.mu.Lock()
	m.revived.probed[rec.Target] = time.Now() // a finished probe only
	m.revived.mu.Unlock()
	if !dead {
		return
	}
	action, why := m.reviveFor(rec, n, log)
	if action == reviveNone {
		log.Warn("the volume's mount answers ENOTCONN (its sidecar died while the node plugin was down); not mounted again", "why", why)
		return
	}
	// Published by this process from now on: the new offer's stream tells of its end.
	// Before the offer exists, so that its end finds the publication; forgotten again if
	// nothing could be mounted.
	m.cfg.Store.Remember(rec.Target, nodevolume.Publication{VolumeID: rec.VolumeID, Volume: rec.Volume})
	if !m.revive(ctx, rec, action, why, n, log) {
		m.cfg.Store.Forget(rec.Target)
	}
}

// recent keeps the revival times within reviveWindow of now.
func recent(times []time.Time, now time.Time) []time.Time {
	kept := times[:0]
	for _, t := range times {
		if now.Sub(t) < reviveWindow {
			kept = append(kept, t)
		}
	}
	return kept
}

// lockForRevive takes target's lock, waiting while another call holds it, until ctx ends;
// nil when it could not, or once the target is unpublished.
func (m *Mounter) lockForRevive(ctx context.Context, target string) func() {
	t := time.NewTicker(reviveLockRetry)
	defer t.Stop()
	for {
		if _, ok := m.cfg.Store.Publication(target); !ok {
			return nil
		}
		if end, err := m.cfg.Store.Begin(target); err == nil {
			return end
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// reviveFor is decideRevive for rec's pod as the node plugin's cache and the pod's emptyDir
// show it now.
func (m *Mounter) reviveFor(rec *offerRecord, revived int, log *slog.Logger) (reviveAction, string) {
	var pod *corev1.Pod
	known := false
	if m.cfg.Pods != nil {
		pod, known = m.cfg.Pods(rec.PodUID)
	}
	depth, err := fusemount.Depth(rec.Target)
	if err != nil {
		log.Warn("cannot count the mounts at the target", "err", err)
		depth = maxRecoverDepth // no more stacking on what cannot be counted
	}
	return decideRevive(pod, known, m.exitFilePresent(rec.PodUID, log), revived, depth)
}

// probe is fusemount.Dead, at most maxProbes at once.
func (m *Mounter) probe(ctx context.Context, target string) (bool, error) {
	select {
	case m.revived.probes <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-m.revived.probes }()
	return fusemount.Dead(ctx, target, fusemount.ProbeTimeout)
}

// waitDead probes target until its mount answers ENOTCONN, for up to reviveDeadWait.
func (m *Mounter) waitDead(ctx context.Context, target string, log *slog.Logger) bool {
	deadline := time.Now().Add(reviveDeadWait)
	for {
		dead, err := m.probe(ctx, target)
		if err != nil {
			log.Warn("sidecar ended; cannot probe its mount", "err", err)
			return false
		}
		if dead || time.Now().After(deadline) {
			return dead
		}
		t := time.NewTimer(reviveDeadRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// exitFilePresent reports whether the node plugin told the pod's sidecar to exit; an
// emptyDir that cannot be read counts as told (nothing is mounted again).
func (m *Mounter) exitFilePresent(podUID string, log *slog.Logger) bool {
	dir, err := m.cfg.Files.OpenEmptyDir(podUID)
	if err != nil {
		log.Warn("cannot open the pod's emptyDir", "err", err)
		return true
	}
	defer dir.Close()
	ok, err := podfiles.Present(dir)
	if err != nil {
		log.Warn("cannot check the pod's exit file", "err", err)
		return true
	}
	return ok
}

// serveEIO mounts rec's target again, on top of its dead mount, and answers the new
// connection with I/O errors until the mount is gone (stopEIO, at the unpublish).
func (m *Mounter) serveEIO(rec *offerRecord) error {
	if err := m.eioRoom(); err != nil {
		return err
	}
	fuse, err := fusemount.Mount(rec.Target, m.mountOptions(rec))
	if err != nil {
		return err
	}
	if err := m.answerEIO(rec, fuse); err != nil {
		m.detachTop(rec.Target)
		return err
	}
	return nil
}

// eioRoom fails when the node plugin answers maxEIOServers targets already.
func (m *Mounter) eioRoom() error {
	m.revived.mu.Lock()
	n := len(m.revived.eio)
	m.revived.mu.Unlock()
	if n >= maxEIOServers {
		return fmt.Errorf("the node plugin answers %d dead targets with I/O errors already (at most %d)", n, maxEIOServers)
	}
	return nil
}

// answerEIO answers rec's connection fuse (whose INIT is still to come; it takes fuse)
// with I/O errors until the mount is gone (stopEIO, at the unpublish), and records it so
// that a restarted node plugin answers it again.
func (m *Mounter) answerEIO(rec *offerRecord, fuse *os.File) error {
	f, err := fuseerr.Pollable(fuse)
	fuse.Close()
	if err != nil {
		return err
	}
	srv := &eioServer{fuse: f, done: make(chan struct{})}
	initDone := make(chan struct{})
	served := make(chan error, 1)
	go func() { // owned by the mounter: ends when the mount is gone or stopEIO closes f
		defer close(srv.done)
		err := fuseerr.Serve(f, eioInitWait, func() { close(initDone) })
		// Closed whatever ended it: a descriptor open with nobody reading would hold every
		// access, containerd's stat included, for ever; closed, the mount answers ENOTCONN.
		f.Close()
		if err != nil {
			m.cfg.Log.Error("the I/O-error server of a target ended", "target", rec.Target, "err", err)
		}
		served <- err
	}()
	select {
	case <-initDone:
	case err := <-served:
		return fmt.Errorf("answer the connection: %w", err)
	}
	// One per target: a connection answered here has no sidecar whose end revives it again.
	m.revived.mu.Lock()
	m.revived.eio[rec.Target] = srv
	m.revived.mu.Unlock()
	// A restarted node plugin answers it again (Recover): its end would leave it dead.
	eio := *rec
	eio.EIO = true
	if err := m.saveRecord(&eio); err != nil {
		m.cfg.Log.Warn("cannot record the target answered with I/O errors; a node plugin restart would leave it dead", "target", rec.Target, "err", err)
	}
	return nil
}

// SidecarEnded is the node plugin's pod watch telling that pod's sidecar container ended
// non-zero (killed, crashed, or its start cut by a kubelet or containerd restart:
// StartError). A legacy sidecar of a restartPolicy: Never pod is never restarted, so the
// offers it had not taken would wait for ever: their mounts unanswered, a container's
// creation blocks on them, and the pod stays Pending (the chaos soak's last hang). Each is
// withdrawn and answered with I/O errors: the containers start and fail, and the pod ends.
// Called from the pod watch; bounded.
func (m *Mounter) SidecarEnded(pod *corev1.Pod) {
	if pod == nil || pod.DeletionTimestamp != nil {
		return
	}
	if restarts, ok := sidecarRestarts(pod); !ok || restarts {
		return
	}
	m.revived.mu.Lock()
	var recs []*offerRecord
	for _, rec := range m.revived.pending {
		if rec.PodUID == string(pod.UID) {
			recs = append(recs, rec)
		}
	}
	m.revived.mu.Unlock()
	for _, rec := range recs {
		m.answerUntaken(rec)
	}
}

// answerUntaken withdraws rec's offer, if no sidecar took it yet, and answers its mount
// with I/O errors.
func (m *Mounter) answerUntaken(rec *offerRecord) {
	log := m.cfg.Log.With("pod", rec.Pod.Namespace+"/"+rec.Pod.Name, "podUID", rec.PodUID, "volume", rec.Volume.VolumeName)
	ctx, cancel := context.WithTimeout(context.Background(), untakenTimeout)
	defer cancel()
	end := m.lockForRevive(ctx, rec.Target)
	if end == nil {
		log.Warn("the sidecar ended before taking the volume; the target stayed busy, not answered")
		return
	}
	defer end()
	offer := m.cfg.Store.TakeOffer(rec.Target)
	if offer == nil {
		return // unpublished, or taken and ended meanwhile
	}
	fuse, err := offer.Withdraw(ctx)
	if err != nil {
		m.cfg.Store.PutOffer(rec.Target, offer)
		log.Info("the sidecar ended; its offer was taken meanwhile", "err", err)
		return
	}
	m.forgetPending(rec.Target)
	if err := m.eioRoom(); err != nil {
		fuse.Close()
		log.Error("the sidecar ended before taking the volume and is not restarted; cannot answer it with I/O errors", "err", err)
		return
	}
	if err := m.answerEIO(rec, fuse); err != nil {
		log.Error("the sidecar ended before taking the volume and is not restarted; cannot answer it with I/O errors", "err", err)
		return
	}
	log.Warn("the sidecar ended before taking the volume and is not restarted; answering it with I/O errors, so that the pod's containers start and fail instead of waiting on it")
	nodevolume.PodEventTo(m.cfg.Events, rec.Pod, true, contract.EventVolumeLost, fmt.Sprintf(
		"volume %s (bucket %s): %s ended before it took the volume and is not restarted (legacy, restartPolicy: Never): the volume answers I/O errors",
		rec.Volume.VolumeName, rec.Volume.Bucket, contract.SidecarContainerName))
}

// forgetPending drops target from the offers no sidecar took yet.
func (m *Mounter) forgetPending(target string) {
	m.revived.mu.Lock()
	delete(m.revived.pending, target)
	m.revived.mu.Unlock()
}

// detachTop takes off the mount just stacked on target when it cannot be served: the dead
// one under it is left as it was.
func (m *Mounter) detachTop(target string) {
	if err := fusemount.UnmountTop(target); err != nil {
		m.cfg.Log.Warn("cannot take off a mount that cannot be served", "target", target, "err", err)
	}
}

// stopEIO ends the server of target's connection answered with I/O errors, if any, after
// its mount is gone, and forgets the target's revivals.
func (m *Mounter) stopEIO(target string) {
	m.revived.mu.Lock()
	srv := m.revived.eio[target]
	delete(m.revived.eio, target)
	delete(m.revived.times, target)
	delete(m.revived.probed, target)
	m.revived.mu.Unlock()
	if srv == nil {
		return
	}
	srv.fuse.Close()
	t := time.NewTimer(eioStopWait)
	defer t.Stop()
	select {
	case <-srv.done:
	case <-t.C:
		m.cfg.Log.Warn("the I/O-error server of an unpublished target did not stop in time", "target", target)
	}
}
