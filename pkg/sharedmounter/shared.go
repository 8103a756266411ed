package sharedmounter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
)

// Layout under Config.Dir (paths on the host, which the node plugin sees as they are):
//   - mounter/: the mounter's directory (its hostPath, where the mounter sees
//     contract.TmpMountPath): hand-off sockets, credentials, gcsfuse's temp dirs, as in a
//     pod's gcsfuse-tmp emptyDir, each named after the key.
//   - mnt/<key>: the key's FUSE mount, which each target binds.
const (
	sharedMounterDir = "mounter"
	sharedMountDir   = "mnt"
	// aliveWait bounds the check that a mount still has its gcsfuse: a dead connection
	// answers ENOTCONN, or EIO from the mounter, at once; a live one answers in
	// microseconds; one that does not answer in time is taken as not alive.
	aliveWait = 500 * time.Millisecond
	// sharedStartGrace: a mount whose gcsfuse has not reported yet (neither serving nor
	// ended) is starting, and the kernel holds every request, a statfs too, until gcsfuse
	// answers its INIT (after its bucket check and first token exchange: seconds with real
	// GCS): it is taken as alive, and bound, for this long after its offer was taken. The
	// mounter reports the start's end either way; this bounds a report that never comes.
	sharedStartGrace = 2 * time.Minute
)

func (m *Mounter) mounterDir() string { return MounterDir(m.cfg.Dir) }
func (m *Mounter) mountPath(name string) string {
	return filepath.Join(m.cfg.Dir, sharedMountDir, name)
}

// prepareSharedDir makes the shared directory and gives the mounter its own, which the
// kubelet created as root for the mounter's hostPath.
func (m *Mounter) prepareSharedDir() error {
	for _, d := range []string{m.cfg.Dir, filepath.Join(m.cfg.Dir, sharedMountDir), m.mounterDir()} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("shared mount directory: %w", err)
		}
	}
	if err := os.Chown(m.mounterDir(), m.cfg.UID, m.cfg.GID); err != nil {
		return fmt.Errorf("give %s to the mounter (uid %d): %w", m.mounterDir(), m.cfg.UID, err)
	}
	if err := os.Chmod(m.mounterDir(), 0o750); err != nil {
		return err
	}
	// The mounter's running lock, which it opens read-only (podfiles.HoldMounterRunning).
	// Not fatal: the node plugin serves every other volume of the node without it.
	dir, err := podpath.OpenDir(m.mounterDir())
	if err == nil {
		err = podfiles.CreateMounterRunning(dir)
		dir.Close()
	}
	if err != nil {
		m.cfg.Log.Warn("cannot make the mounter's running lock; a mounter that starts waits for it", "dir", m.mounterDir(), "err", err)
	}
	return nil
}

// sharedKey is the request's sharing key: everything gcsfuse and the mount are given, and
// who reads. For a Secret's key the namespace is added to the key's identity, so that pods
// of two namespaces never share a process even with one key.
func sharedKey(r *nodevolume.Request) sharedmount.Key {
	id := string(r.Creds.Kind) + ": " + r.Creds.Identity
	if r.Creds.Kind == credentials.KindKey {
		id = r.Pod.Namespace + "/" + id
	}
	return sharedmount.Key{
		Bucket: r.Volume.Bucket, Flags: nodevolume.WithoutMachineType(r.Volume.Flags), ReadOnly: r.Volume.ReadOnly,
		NoExec: r.Opts.NoExec, NoAtime: r.Opts.NoAtime, ReadAheadKB: r.Opts.ReadAheadKB,
		Endpoint: r.Volume.Endpoint, Identity: id,
	}
}

// useSharedKey points the request at a shared mount's files in the mounter's directory:
// the hand-off volume is named after the mount (its key and generation), and the
// credential configuration names the token file where the mounter reads it.
func (m *Mounter) useSharedKey(req *nodevolume.Request, mount string, attrs map[string]string, secrets map[string]string) error {
	plan, err := credentials.Build(m.cfg.Credentials, credentials.Request{
		Volume: req.Target.VolumeName, Bucket: req.Opts.Bucket, Attributes: attrs, Secrets: secrets,
		SidecarTokenFile: podfiles.At(m.cfg.MounterTmpPath).CredentialsTokenFile(mount),
	})
	if err != nil {
		return status.Errorf(codes.Internal, "volume %s: credentials for the shared mount: %v", req.Target.VolumeName, err)
	}
	req.Creds = plan
	req.Shared = mount
	req.Volume.VolumeName = mount
	return nil
}

// DefaultOfferWait bounds the wait for the node's mounter to take a new shared
// mount's descriptor (Config.OfferWait): a mounter that is not running (crash-looping,
// unschedulable, not yet started on a new node) must fail the publish, which the kubelet
// retries and shows as a FailedMount Event, and never leave a pod bound to a mount nobody
// serves, hanging at its first access. A running mounter takes an offer in milliseconds
// (inotify); the kubelet gives a publish 2 minutes.
const DefaultOfferWait = 30 * time.Second

// publishShared binds the target to its key's mount, starting a mount when the key has
// none that serves. Under the key's lock (pkg/sharedmount) it writes this pod's credentials
// into the mount's files, so that a stop of an older mount of the key never removes them;
// the caller holds the target's lock.
func (m *Mounter) publishShared(ctx context.Context, r *nodevolume.Request, target string, attrs, secrets map[string]string, log *slog.Logger) error {
	m.gate.RLock()
	defer m.gate.RUnlock()
	if m.closed {
		return status.Errorf(codes.Unavailable, "volume %s: the node plugin is stopping; the kubelet retries the mount on the next one", r.Target.VolumeName)
	}
	if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return status.Errorf(codes.Internal, "create target %s: %v", target, err)
	}
	if err := m.mounterNotStopping(r); err != nil {
		return err
	}
	u := sharedmount.User{Target: target, PodNamespace: r.Pod.Namespace, PodName: r.Pod.Name, PodUID: r.Pod.UID, Volume: r.Target.VolumeName}
	key := sharedKey(r).Name()
	start := time.Now()
	mount, started, err := m.table.Publish(key, u, func(mount string, fresh bool) error {
		if err := ctx.Err(); err != nil { // waited for the key's lock past the kubelet's deadline
			return status.FromContextError(err).Err()
		}
		if err := m.mounterNotStopping(r); err != nil { // it began to stop while we waited
			return err
		}
		if err := m.useSharedKey(r, mount, attrs, secrets); err != nil {
			return err
		}
		_, err := m.cfg.Files.WriteCredentials(r)
		if err == nil {
			err = m.cfg.Files.WriteCABundle(r)
		}
		if err == nil && fresh {
			err = m.startShared(ctx, r, log)
		}
		if err != nil && fresh {
			m.removeSharedFiles(mount) // a mount that never started serves no one
		}
		return err
	})
	if err != nil {
		if errors.Is(err, sharedmount.ErrStopping) {
			return status.Errorf(codes.Unavailable, "volume %s: %v", r.Target.VolumeName, err)
		}
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Errorf(codes.Internal, "volume %s (bucket %s): shared mount %s: %v", r.Target.VolumeName, r.Volume.Bucket, mount, err)
	}
	m.cfg.Store.PutPlan(target, nodevolume.SharedPlan{Mount: mount, Plan: r.Creds})
	m.mu.Lock()
	ended := m.ended[mount]
	m.mu.Unlock()
	log.Info("volume bound to the node's shared mount", "mount", mount, "started", started, "ms", time.Since(start).Milliseconds(),
		"readOnly", r.Volume.ReadOnly, "flags", r.Volume.Flags)
	if ended != nil && m.table.Dead(mount) {
		// Its gcsfuse ended while this target was being bound: the pods bound before were
		// told, this one was not yet.
		m.tellEnded(u, r.Volume, ended)
	} else if !started {
		m.event(r.Pod, false, contract.EventSharedMountJoined, fmt.Sprintf("volume %s: bound to the node's running gcsfuse for bucket %s (shared mount %s)", r.Target.VolumeName, r.Volume.Bucket, mount))
	}
	return nil
}

// startShared mounts a new FUSE connection for the mount (a new generation of its key: its
// mount point is its own) and offers it to the mounter, then waits, bounded, until the
// mounter has taken it.
func (m *Mounter) startShared(ctx context.Context, r *nodevolume.Request, log *slog.Logger) error {
	mnt := m.mountPath(r.Shared)
	if m, err := fusemount.Lookup(mnt); err != nil || m != nil {
		return errors.Join(fmt.Errorf("%s is mounted already: a mount's name is never given twice", mnt), err)
	}
	if err := os.Mkdir(mnt, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", mnt, err)
	}
	fuse, err := fusemount.Mount(mnt, fusemount.Options{
		Source: r.Volume.Bucket, ReadOnly: r.Volume.ReadOnly, NoExec: r.Opts.NoExec, NoAtime: r.Opts.NoAtime,
		UserID: m.cfg.UID, GroupID: m.cfg.GID,
	})
	if err != nil {
		return err
	}
	undo := func(cause error) error {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second+m.cfg.UnmountBusyWait)
		defer cancel()
		m.stopSharedOffer(uctx, r.Shared)
		uerr := fusemount.Unmount(uctx, mnt, m.cfg.UnmountBusyWait)
		if err := os.Remove(mnt); err != nil && !errors.Is(err, os.ErrNotExist) && uerr == nil {
			uerr = err
		}
		return errors.Join(cause, uerr)
	}
	dir, err := podpath.OpenDir(m.mounterDir())
	if err == nil {
		var hd *os.File
		hd, err = podfiles.CreateHandoffDir(dir)
		dir.Close()
		if err == nil {
			taken := make(chan struct{})
			err = m.offerShared(r, hd, fuse, taken, log)
			fuse = nil // offerShared's now: the offer's, or closed on its error
			if err == nil {
				if err = m.waitTaken(ctx, r, taken, log); err != nil {
					return undo(err)
				}
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("offer to the node's mounter: %w", err)
		if fuse != nil {
			fuse.Close()
		}
		return undo(err)
	}
	return nil
}

// staleStoppingAfter is how long past its deadline a mounter's stopping record still
// counts: by then that mounter has been killed, and a replacement removes the record at start.
const staleStoppingAfter = 30 * time.Second

// mounterNotStopping refuses a shared publish while the node's mounter is stopping (its pod
// deleted or replaced: podfiles.MounterStoppingFile) with Unavailable, which the kubelet
// retries: a new pod bound now, to a new mount or to a live one, would lose its gcsfuse at
// the mounter's end; its retry lands on the next mounter. The mounter takes no new mount
// then either (its offer would time out after Config.OfferWait, the same answer,
// later); this says why at once.
func (m *Mounter) mounterNotStopping(r *nodevolume.Request) error {
	dir, err := podpath.OpenDir(m.mounterDir())
	if err != nil {
		return status.Errorf(codes.Internal, "volume %s: open the shared mounter's directory: %v", r.Target.VolumeName, err)
	}
	defer dir.Close()
	stopping, until, err := podfiles.ReadMounterStopping(dir)
	if err != nil {
		return status.Errorf(codes.Internal, "volume %s: %v", r.Target.VolumeName, err)
	}
	if !stopping || (!until.IsZero() && time.Since(until) > staleStoppingAfter) {
		// Past its deadline and more, the record is a dead mounter's (one that never got to
		// remove it, or a replacement that cannot start): the offer's wait then says whether
		// a mounter runs, which is the question.
		return nil
	}
	when := ""
	if !until.IsZero() {
		when = fmt.Sprintf(", serving what it has until %s", until.Format(time.RFC3339))
	}
	return status.Errorf(codes.Unavailable, "volume %s (bucket %s): the node's shared mounter (container %s) is stopping (its pod deleted or replaced%s): shared volumes mount again once its replacement runs; the kubelet retries",
		r.Target.VolumeName, r.Volume.Bucket, contract.SharedMounterContainerName, when)
}

// waitTaken waits for the mounter to take a shared mount's descriptor, bounded by
// Config.OfferWait and the call's own deadline.
func (m *Mounter) waitTaken(ctx context.Context, r *nodevolume.Request, taken <-chan struct{}, log *slog.Logger) error {
	start := time.Now()
	timer := time.NewTimer(m.cfg.OfferWait)
	defer timer.Stop()
	select {
	case <-taken:
		log.Debug("the node's mounter took the shared mount", "mount", r.Shared, "ms", time.Since(start).Milliseconds())
		return nil
	case <-timer.C:
	case <-ctx.Done():
		log.Error("the kubelet's deadline passed before the node's mounter took a shared mount", "mount", r.Shared, "waited", time.Since(start).String())
		return status.Errorf(status.FromContextError(ctx.Err()).Code(), "volume %s (bucket %s): the call ended before the node's shared mounter (container %s) took shared mount %s (%s): is it running?",
			r.Target.VolumeName, r.Volume.Bucket, contract.SharedMounterContainerName, r.Shared, time.Since(start).Round(time.Millisecond))
	}
	msg := fmt.Sprintf("volume %s (bucket %s): the node's shared mounter (container %s of the gcsfuse-csi node DaemonSet's mounter pod on this node) did not take shared mount %s within %s: is it running? (kubectl get pods -n <the driver's namespace> -o wide, on this node)",
		r.Target.VolumeName, r.Volume.Bucket, contract.SharedMounterContainerName, r.Shared, time.Since(start).Round(time.Second))
	log.Error("the node's mounter did not take a shared mount", "mount", r.Shared, "waited", time.Since(start).String())
	return status.Error(codes.Unavailable, msg)
}

// offerShared offers the mount's descriptor to the mounter; taken is closed once the
// mounter has it.
func (m *Mounter) offerShared(r *nodevolume.Request, handoffDir, fuse *os.File, taken chan struct{}, log *slog.Logger) error {
	name, vol, publishedAt := r.Shared, r.Volume, time.Now()
	readAhead := r.Opts.ReadAheadKB
	offer, err := handoff.NewOffer(handoff.OfferConfig{
		Dir: handoffDir, Volume: &vol, Fuse: fuse, UID: m.cfg.UID, GID: m.cfg.GID,
		OnHandedOff: func() {
			m.mu.Lock()
			m.starting[name] = time.Now()
			m.mu.Unlock()
			close(taken)
		},
		OnStatus: func(st *handoff.Status) {
			m.cfg.Metrics.Status(st, publishedAt)
			if st.State == handoff.StateStarted && readAhead != nil {
				// No pod to tell: a failure is the mount's, logged.
				nodevolume.ApplyReadAhead(m.mountPath(name), readAhead, nodevolume.PodRef{}, vol.VolumeName, nil, log)
			}
			m.onSharedStatus(name, vol, st, log)
		},
		// The mounter closed the stream without reporting an end: it exited, was killed
		// (its pod deleted past its grace, its container OOM-killed) or crashed, and every
		// gcsfuse with it. Its pods are told as for any end, never left to find ENOTCONN. An
		// end already reported is in m.ended (onSharedStatus).
		OnStatusEnd: func() {
			m.mu.Lock()
			_, reported := m.ended[name]
			m.mu.Unlock()
			if !reported {
				st := &handoff.Status{State: handoff.StateExited, Message: mounterGone}
				m.cfg.Metrics.Status(st, publishedAt)
				m.onSharedStatus(name, vol, st, log)
			}
		},
		Log: log.With("mount", name),
	})
	if err != nil {
		handoffDir.Close()
		fuse.Close()
		return err
	}
	m.cfg.Store.PutOffer(name, offer)
	return nil
}

// stopSharedOffer ends a mount's offer (and its relay of the mounter's reports).
func (m *Mounter) stopSharedOffer(ctx context.Context, mount string) {
	if offer := m.cfg.Store.TakeOffer(mount); offer != nil {
		if err := offer.Stop(ctx); err != nil {
			m.cfg.Log.Warn("shared hand-off did not stop in time", "mount", mount, "err", err)
		}
	}
}

// mounterGone is the end of a shared mount whose mounter ended without a word about it.
var mounterGone = fmt.Sprintf("the node's shared mounter (container %s) ended without reporting it: killed (its pod deleted past its grace period, or its container OOM-killed), restarted or crashed, and this mount's gcsfuse with it (kubectl describe the gcsfuse-csi-mounter pod of this node)",
	contract.SharedMounterContainerName)

// endState reports whether a mounter's report ends its mount.
func endState(state string) bool {
	return state == handoff.StateExited || state == handoff.StateFailed || state == handoff.StateRefused
}

// onSharedStatus tells every pod of the mount what the mounter reports. A gcsfuse that
// ended (exited, failed or refused) ends the mount for the pods that hold it; the next pod
// of the key gets a new one. Reports name their mount's generation, so a late one about a
// replaced mount never touches its replacement.
func (m *Mounter) onSharedStatus(name string, vol handoff.Volume, st *handoff.Status, log *slog.Logger) {
	log = log.With("mount", name, "state", st.State, "ms", st.ElapsedMillis)
	if st.State == handoff.StateStarted || endState(st.State) {
		m.mu.Lock()
		delete(m.starting, name)
		m.mu.Unlock()
	}
	switch st.State {
	case handoff.StateStarted:
		log.Info("shared gcsfuse serving")
		what := fmt.Sprintf("the node's shared gcsfuse serving after %d ms", st.ElapsedMillis)
		for _, u := range m.table.Users(name) {
			m.event(m.podOf(u), false, contract.EventGcsfuseStarted, fmt.Sprintf("volume %s (bucket %s): %s", u.Volume, vol.Bucket, what))
		}
	case handoff.StateExited, handoff.StateFailed, handoff.StateRefused:
		log.Error("shared gcsfuse ended", "message", st.Message)
		m.mu.Lock()
		m.ended[name] = st
		m.mu.Unlock()
		for _, u := range m.table.Died(name) {
			m.tellEnded(u, vol, st)
		}
	default:
		log.Debug("mounter status", "message", st.Message)
	}
}

// tellEnded tells a pod that its shared mount's gcsfuse ended.
func (m *Mounter) tellEnded(u sharedmount.User, vol handoff.Volume, st *handoff.Status) {
	reason := contract.EventGcsfuseExited
	if st.State == handoff.StateFailed {
		reason = contract.EventGcsfuseFailed
	}
	who := ""
	if vol.Identity != "" {
		who = ", identity " + vol.Identity
	}
	m.event(m.podOf(u), true, reason, fmt.Sprintf("volume %s (bucket %s%s): the node's shared gcsfuse (%s) ended: %s; this pod's mount fails from now on (recreate the pod; pods started from now get a new gcsfuse)",
		u.Volume, vol.Bucket, who, vol.VolumeName, st.Message))
}

// podOf names a user's pod; one recovered at start-up has only its UID, and the pod
// watcher's cache gives the rest.
func (m *Mounter) podOf(u sharedmount.User) nodevolume.PodRef {
	pod := nodevolume.PodRef{Namespace: u.PodNamespace, Name: u.PodName, UID: u.PodUID}
	if pod.Name == "" && m.cfg.Pods != nil {
		if p, ok := m.cfg.Pods(u.PodUID); ok {
			pod.Namespace, pod.Name = p.Namespace, p.Name
		}
	}
	return pod
}

// sharedPlanOf returns a shared target's latest credentials (none for a target found at
// start-up until its first republish).
func (m *Mounter) sharedPlanOf(target string) (*credentials.Plan, bool) {
	p, ok := m.cfg.Store.Plan(target)
	return p.Plan, ok
}

// principal names who reads with a plan: its kind and identity, without a key's ID (a
// rotated key of the same service account reads as the same one).
func principal(p *credentials.Plan) string {
	id := p.Identity
	if p.Kind == credentials.KindKey {
		if i := strings.LastIndex(id, " (key "); i >= 0 {
			id = id[:i]
		}
	}
	return string(p.Kind) + ": " + id
}

// rememberPlan records a republished shared target's fresh credentials.
func (m *Mounter) rememberPlan(target string, r *nodevolume.Request) {
	m.cfg.Store.PutPlan(target, nodevolume.SharedPlan{Mount: r.Shared, Plan: r.Creds})
}

// handOverToken runs, under the key's lock, when target left its mount: the mount's files
// may carry the token of target's pod, which the STS refuses once the pod is gone (a
// Kubernetes token is bound to its pod). The freshest token of another pod bound to the
// same mount is written instead, so the mount keeps working for them without waiting for
// the kubelet's next republish. Never another mount's pods: another key is another
// identity.
func (m *Mounter) handOverToken(target, mount string) {
	gone, ok, others := m.cfg.Store.TakePlan(target)
	var next *credentials.Plan
	for _, p := range others {
		if p.Plan.Kind == credentials.KindFederation && (next == nil || p.Plan.TokenExpiry.After(next.TokenExpiry)) {
			next = p.Plan
		}
	}
	if !ok || gone.Plan.Kind != credentials.KindFederation || next == nil {
		return
	}
	dir, err := podpath.OpenDir(m.mounterDir())
	if err != nil {
		m.cfg.Log.Warn("cannot hand the shared mount another pod's token", "mount", mount, "err", err)
		return
	}
	defer dir.Close()
	if _, err := credentials.Write(dir, mount, next, m.cfg.UID, m.cfg.GID); err != nil {
		m.cfg.Log.Warn("cannot hand the shared mount another pod's token", "mount", mount, "err", err)
		return
	}
	m.cfg.Log.Info("shared mount's token handed to another pod of its mount", "mount", mount, "identity", next.Identity, "tokenExpiry", next.TokenExpiry)
}

// ops are the effects pkg/sharedmount asks for.
type ops struct{ m *Mounter }

func (o ops) Bind(name, target string) error {
	return fusemount.Bind(o.m.mountPath(name), target)
}

// Alive asks the mount's file system for its statistics, with a bound: gcsfuse answers
// that at once without GCS; a mount whose gcsfuse is gone answers ENOTCONN (connection
// aborted) or EIO (the mounter answering it in gcsfuse's place; it answers the root's
// attributes, so a stat would not tell). One that does not answer within aliveWait is
// taken as not alive: a new pod bound to it would hang at its first access, where a new
// mount of the key serves it (the silent one keeps its pods).
func (o ops) Alive(name string) bool {
	o.m.mu.Lock()
	since, starting := o.m.starting[name]
	o.m.mu.Unlock()
	if starting && time.Since(since) < sharedStartGrace {
		return true
	}
	done := make(chan error, 1)
	statfs := o.m.statfs
	if statfs == nil {
		statfs = unix.Statfs
	}
	go func() { // ends with the call; one stuck on a hung server ends when its mount does
		var st unix.Statfs_t
		done <- statfs(o.m.mountPath(name), &st)
	}()
	timer := time.NewTimer(aliveWait)
	defer timer.Stop()
	select {
	case err := <-done:
		return !errors.Is(err, unix.ENOTCONN) && !errors.Is(err, unix.ECONNABORTED) && !errors.Is(err, unix.EIO)
	case <-timer.C:
		o.m.cfg.Log.Warn("a shared mount did not answer a statfs in time; taken as not alive", "mount", name, "waited", aliveWait.String())
		return false
	}
}

// Stop ends the mount's offer, unmounts it (its gcsfuse then exits cleanly) and removes its
// mount point and files. An error leaves the rest for the table's next try.
func (o ops) Stop(name string) error {
	m := o.m
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+m.cfg.UnmountBusyWait)
	defer cancel()
	m.stopSharedOffer(ctx, name)
	mnt := m.mountPath(name)
	if err := fusemount.Unmount(ctx, mnt, m.cfg.UnmountBusyWait); err != nil {
		return err
	}
	if err := os.Remove(mnt); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the shared mount point %s: %w", mnt, err)
	}
	if err := m.removeSharedFilesErr(name); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.ended, name)
	delete(m.starting, name)
	m.mu.Unlock()
	return nil
}

// removeSharedFiles removes a mount's credential files and CA bundle from the mounter's
// directory, logging what it could not.
func (m *Mounter) removeSharedFiles(name string) {
	if err := m.removeSharedFilesErr(name); err != nil {
		m.cfg.Log.Warn("cannot remove a shared mount's credential files", "mount", name, "err", err)
	}
}

func (m *Mounter) removeSharedFilesErr(name string) error {
	dir, err := podpath.OpenDir(m.mounterDir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer dir.Close()
	if err := podfiles.RemoveCredentials(dir, name); err != nil {
		return fmt.Errorf("remove the credential files of %s: %w", name, err)
	}
	return nil
}

// Recover finds the shared mounts a previous node plugin made and the targets that
// bind them (by device number), so that they keep counting: a restart does not touch a
// serving mount. What a node plugin killed mid-publish or mid-stop left of a mount that no
// longer exists (its mount point, credential files, hand-off socket) is removed. Returns how
// many mounts it found. Called before the gRPC server serves: nothing is being published.
func (m *Mounter) Recover() (int, error) {
	root := filepath.Join(m.cfg.Dir, sharedMountDir)
	mounts, err := fusemount.MountsUnder(root)
	if err != nil {
		return 0, err
	}
	live := map[string]bool{}
	watch := map[string]handoff.Volume{}
	defer func() {
		m.removeSharedOrphans(live)
		m.watchRecovered(watch)
	}()
	n := 0
	for _, mnt := range mounts {
		name := filepath.Base(mnt)
		if _, _, ok := sharedmount.ParseMount(name); filepath.Dir(mnt) != root || !ok {
			continue
		}
		info, err := fusemount.Lookup(mnt)
		if err != nil || info == nil {
			continue
		}
		targets, err := fusemount.MountsOfDevice(filepath.Join(m.cfg.KubeletRoot, "pods"), info.Major, info.Minor)
		if err != nil {
			return n, err
		}
		var users []sharedmount.User
		for _, t := range targets {
			pt, err := podfiles.ParseTarget(m.cfg.KubeletRoot, t)
			if err != nil {
				continue // a subPath's bind of the target, not a target
			}
			users = append(users, sharedmount.User{Target: t, PodUID: pt.PodUID, Volume: pt.VolumeName})
		}
		m.table.Restore(name, users)
		live[name] = true
		watch[name] = handoff.Volume{VolumeName: name, Bucket: info.Source}
		m.cfg.Log.Info("shared mount found at start-up", "mount", name, "targets", len(users))
		n++
	}
	return n, nil
}

// removeSharedOrphans removes what belongs to a shared mount that is not live: an empty
// mount point under mnt/, credential files and a hand-off socket in the mounter's directory
// (which the mounter's user owns: opened without following a symlink, podpath). Names that
// are not a mount's are left alone.
func (m *Mounter) removeSharedOrphans(live map[string]bool) {
	orphan := func(name string) bool {
		_, _, ok := sharedmount.ParseMount(name)
		return ok && !live[name]
	}
	removed := 0
	if entries, err := os.ReadDir(filepath.Join(m.cfg.Dir, sharedMountDir)); err == nil {
		for _, e := range entries {
			if orphan(e.Name()) {
				if err := os.Remove(m.mountPath(e.Name())); err != nil {
					m.cfg.Log.Warn("cannot remove a stale shared mount point", "mount", e.Name(), "err", err)
				} else {
					removed++
				}
			}
		}
	}
	dir, err := podpath.OpenDir(m.mounterDir())
	if err != nil {
		return
	}
	defer dir.Close()
	if vols, err := podfiles.CredentialVolumes(dir); err == nil {
		for _, v := range vols {
			if orphan(v) {
				m.removeSharedFiles(v)
				removed++
			}
		}
	}
	if hd, err := podpath.OpenSub(dir, podfiles.HandoffDir); err == nil {
		names, _ := hd.Readdirnames(-1)
		for _, name := range names {
			if v, err := podfiles.HandoffSocketVolume(name); err == nil && orphan(v) {
				if err := podpath.Remove(hd, name); err != nil {
					m.cfg.Log.Warn("cannot remove a stale hand-off socket", "socket", name, "err", err)
				} else {
					removed++
				}
			}
		}
		hd.Close()
	}
	if removed > 0 {
		m.cfg.Log.Info("removed what a previous node plugin left of shared mounts that no longer exist", "entries", removed)
	}
}

// sharedMountPodsDesc is metricscatalog.SharedMountPods: 1 for every pod volume bound to a
// shared mount, labelled with the sharing key.
var sharedMountPodsDesc = metricscatalog.SharedMountPods.NewDesc()

// Metrics is the shared mounts' view for metrics: the mounter's metrics source (its
// directory and the keys it serves, for pkg/podmetrics) and a collector of
// metricscatalog.SharedMountPods.
func (m *Mounter) Metrics() (dir string, keys func() []string, users prometheus.Collector) {
	keys = func() []string {
		snap := m.table.Snapshot()
		out := make([]string, 0, len(snap))
		for k := range snap {
			out = append(out, k)
		}
		return out
	}
	return m.mounterDir(), keys, usersCollector{m}
}

type usersCollector struct{ m *Mounter }

func (c usersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sharedMountPodsDesc }

func (c usersCollector) Collect(ch chan<- prometheus.Metric) {
	for key, users := range c.m.table.Snapshot() {
		for _, u := range users {
			pod := c.m.podOf(u)
			ch <- prometheus.MustNewConstMetric(sharedMountPodsDesc, prometheus.GaugeValue, 1, key, pod.Namespace, pod.Name, u.Volume)
		}
	}
}
