package csidriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
)

// The shared mount mode (contract.AttrMountMode shared): the node plugin mounts one FUSE
// connection per sharing key under Config.SharedDir, offers it to the node's mounter (the
// sidecar binary in ModeShared, one per node) exactly as it offers a pod's volume to the
// pod's sidecar, and bind-mounts it on every target of that key. pkg/sharedmount decides
// when a key's mount starts and stops; this file does it.
//
// Layout under SharedDir (paths on the host, which the node plugin sees as they are):
//   - mounter/: the mounter's directory (its hostPath, where the mounter sees
//     contract.TmpMountPath): hand-off sockets, credentials, gcsfuse's temp dirs, as in a
//     pod's gcsfuse-tmp emptyDir, each named after the key.
//   - mnt/<key>: the key's FUSE mount, which each target binds.
const (
	sharedMounterDir = "mounter"
	sharedMountDir   = "mnt"
	// aliveWait bounds the check that a mount still has its gcsfuse: a dead connection
	// answers ENOTCONN, or EIO from the mounter, at once; a live one answers in
	// microseconds, or is busy, and is then taken as alive.
	aliveWait = 500 * time.Millisecond
)

func (s *NodeServer) mounterDir() string { return filepath.Join(s.cfg.SharedDir, sharedMounterDir) }
func (s *NodeServer) sharedMountPath(name string) string {
	return filepath.Join(s.cfg.SharedDir, sharedMountDir, name)
}

// prepareSharedDir makes the shared directory and gives the mounter its own, which the
// kubelet created as root for the mounter's hostPath.
func (s *NodeServer) prepareSharedDir() error {
	for _, d := range []string{s.cfg.SharedDir, filepath.Join(s.cfg.SharedDir, sharedMountDir), s.mounterDir()} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("shared mount directory: %w", err)
		}
	}
	if err := os.Chown(s.mounterDir(), s.cfg.SidecarUID, s.cfg.SidecarGID); err != nil {
		return fmt.Errorf("give %s to the mounter (uid %d): %w", s.mounterDir(), s.cfg.SidecarUID, err)
	}
	return os.Chmod(s.mounterDir(), 0o750)
}

// sharedKey is the request's sharing key: everything gcsfuse and the mount are given, and
// who reads. For a Secret's key the namespace is added to the key's identity, so that pods
// of two namespaces never share a process even with one key.
func sharedKey(r *request) sharedmount.Key {
	id := string(r.creds.Kind) + ": " + r.creds.Identity
	if r.creds.Kind == credentials.KindKey {
		id = r.pod.Namespace + "/" + id
	}
	return sharedmount.Key{
		Bucket: r.volume.Bucket, Flags: withoutMachineType(r.volume.Flags), ReadOnly: r.volume.ReadOnly,
		NoExec: r.opts.NoExec, NoAtime: r.opts.NoAtime, ReadAheadKB: r.opts.ReadAheadKB,
		Endpoint: r.volume.Endpoint, Identity: id,
	}
}

// useSharedKey points the request at the key's files in the mounter's directory: the
// hand-off volume is named after the key, and the credential configuration names the
// token file where the mounter reads it.
func (s *NodeServer) useSharedKey(req *request, name string, attrs map[string]string, secrets map[string]string) error {
	plan, err := credentials.Build(s.cfg.Credentials, credentials.Request{
		Volume: req.target.VolumeName, Bucket: req.opts.Bucket, Attributes: attrs, Secrets: secrets,
		SidecarTokenFile: podfiles.At(s.cfg.MounterTmpPath).CredentialsTokenFile(name),
	})
	if err != nil {
		return status.Errorf(codes.Internal, "volume %s: credentials for the shared mount: %v", req.target.VolumeName, err)
	}
	req.creds = plan
	req.shared = name
	req.volume.VolumeName = name
	return nil
}

// publishShared binds the target to its key's mount, starting the mount when the key has
// none. The caller holds the target's lock and has written the key's credentials.
func (s *NodeServer) publishShared(ctx context.Context, r *request, target, volumeID string, log *slog.Logger) error {
	if err := os.Mkdir(target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return status.Errorf(codes.Internal, "create target %s: %v", target, err)
	}
	u := sharedmount.User{Target: target, PodNamespace: r.pod.Namespace, PodName: r.pod.Name, PodUID: r.pod.UID, Volume: r.target.VolumeName}
	start := time.Now()
	started, err := s.shared.Publish(r.shared, u, func() error { return s.startShared(ctx, r, log) })
	if err != nil {
		if len(s.shared.Users(r.shared)) == 0 {
			// No mount of the key serves anyone: the credentials just written must not stay.
			s.removeSharedFiles(r.shared)
		}
		return status.Errorf(codes.Internal, "volume %s (bucket %s): shared mount %s: %v", r.target.VolumeName, r.volume.Bucket, r.shared, err)
	}
	s.mu.Lock()
	s.published[target] = &publication{volumeID: volumeID, volume: r.volume}
	s.sharedPlans[target] = sharedPlan{key: r.shared, plan: r.creds}
	s.mu.Unlock()
	log.Info("volume bound to the node's shared mount", "key", r.shared, "started", started, "ms", time.Since(start).Milliseconds(),
		"readOnly", r.volume.ReadOnly, "flags", r.volume.Flags)
	if !started {
		s.event(r.pod, false, contract.EventSharedMountJoined, fmt.Sprintf("volume %s: bound to the node's running gcsfuse for bucket %s (shared mount %s)", r.target.VolumeName, r.volume.Bucket, r.shared))
	}
	return nil
}

// startShared mounts a new FUSE connection for the key and offers it to the mounter. A
// dead mount of the same key (its gcsfuse died) is detached first: the targets that bind
// it keep it, and fail, until their pods end.
func (s *NodeServer) startShared(ctx context.Context, r *request, log *slog.Logger) error {
	mnt := s.sharedMountPath(r.shared)
	if m, err := fusemount.Lookup(mnt); err == nil && m != nil {
		if err := fusemount.Detach(mnt); err != nil {
			return err
		}
		log.Warn("detached a dead shared mount; its pods keep failing until they end", "key", r.shared)
	}
	if err := os.Mkdir(mnt, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", mnt, err)
	}
	fuse, err := fusemount.Mount(mnt, fusemount.Options{
		Source: r.volume.Bucket, ReadOnly: r.volume.ReadOnly, NoExec: r.opts.NoExec, NoAtime: r.opts.NoAtime,
		UserID: s.cfg.SidecarUID, GroupID: s.cfg.SidecarGID,
	})
	if err != nil {
		return err
	}
	dir, err := podpath.OpenDir(s.mounterDir())
	if err == nil {
		var hd *os.File
		hd, err = podfiles.CreateHandoffDir(dir)
		dir.Close()
		if err == nil {
			err = s.offerShared(r, hd, fuse, log)
		}
	}
	if err != nil {
		fuse.Close()
		uerr := fusemount.Unmount(ctx, mnt, s.cfg.UnmountBusyWait)
		return errors.Join(fmt.Errorf("offer to the node's mounter: %w", err), uerr)
	}
	return nil
}

func (s *NodeServer) offerShared(r *request, handoffDir, fuse *os.File, log *slog.Logger) error {
	name, vol, publishedAt := r.shared, r.volume, time.Now()
	readAhead := r.opts.ReadAheadKB
	offer, err := handoff.NewOffer(handoff.OfferConfig{
		Dir: handoffDir, Volume: &vol, Fuse: fuse, UID: s.cfg.SidecarUID, GID: s.cfg.SidecarGID,
		OnStatus: func(st *handoff.Status) {
			s.cfg.Metrics.status(st, publishedAt)
			if st.State == handoff.StateStarted && readAhead != nil {
				s.applyReadAhead(&offerRecord{Target: s.sharedMountPath(name), Volume: vol, ReadAheadKB: readAhead}, log)
			}
			s.onSharedStatus(name, vol, st, log)
		},
		Log: log.With("key", name),
	})
	if err != nil {
		handoffDir.Close()
		return err
	}
	s.mu.Lock()
	s.sharedOffers[name] = offer
	s.mu.Unlock()
	return nil
}

// onSharedStatus tells every pod of the key what the mounter reports. A gcsfuse that ended
// (exited, failed or refused) ends the key's mount for the pods that hold it; the next pod
// gets a new one.
func (s *NodeServer) onSharedStatus(name string, vol handoff.Volume, st *handoff.Status, log *slog.Logger) {
	log = log.With("key", name, "state", st.State, "ms", st.ElapsedMillis)
	var users []sharedmount.User
	var reason, what string
	warning := true
	switch st.State {
	case handoff.StateStarted:
		log.Info("shared gcsfuse serving")
		users, reason, warning = s.shared.Users(name), contract.EventGcsfuseStarted, false
		what = fmt.Sprintf("the node's shared gcsfuse serving after %d ms", st.ElapsedMillis)
	case handoff.StateExited, handoff.StateFailed, handoff.StateRefused:
		log.Error("shared gcsfuse ended", "message", st.Message)
		users, reason = s.shared.Died(name), contract.EventGcsfuseExited
		if st.State == handoff.StateFailed {
			reason = contract.EventGcsfuseFailed
		}
		what = fmt.Sprintf("the node's shared gcsfuse (%s) ended: %s; this pod's mount fails from now on (recreate the pod; pods started from now get a new gcsfuse)", name, st.Message)
	default:
		log.Debug("mounter status", "message", st.Message)
		return
	}
	who := ""
	if warning && vol.Identity != "" {
		who = ", identity " + vol.Identity
	}
	for _, u := range users {
		pod := s.podOf(u)
		s.event(pod, warning, reason, fmt.Sprintf("volume %s (bucket %s%s): %s", u.Volume, vol.Bucket, who, what))
	}
}

// podOf names a user's pod; one recovered at start-up has only its UID, and the pod
// watcher's cache gives the rest.
func (s *NodeServer) podOf(u sharedmount.User) PodRef {
	pod := PodRef{Namespace: u.PodNamespace, Name: u.PodName, UID: u.PodUID}
	if pod.Name == "" && s.cfg.Pods != nil {
		if p, ok := s.cfg.Pods(u.PodUID); ok {
			pod.Namespace, pod.Name = p.Namespace, p.Name
		}
	}
	return pod
}

// rememberPlan records a republished shared target's fresh credentials.
func (s *NodeServer) rememberPlan(target string, r *request) {
	s.mu.Lock()
	s.sharedPlans[target] = sharedPlan{key: r.shared, plan: r.creds}
	s.mu.Unlock()
}

// handOverToken runs when target left its key: the key's files may carry the token of
// target's pod, which the STS refuses once the pod is gone (a Kubernetes token is bound to
// its pod). The freshest token of another pod of the key is written instead, so the
// mount keeps working for them without waiting for the kubelet's next republish.
func (s *NodeServer) handOverToken(target, key string) {
	s.mu.Lock()
	gone, ok := s.sharedPlans[target]
	delete(s.sharedPlans, target)
	var next *credentials.Plan
	for _, p := range s.sharedPlans {
		if p.key == key && p.plan.Kind == credentials.KindFederation && (next == nil || p.plan.TokenExpiry.After(next.TokenExpiry)) {
			next = p.plan
		}
	}
	s.mu.Unlock()
	if !ok || gone.plan.Kind != credentials.KindFederation || next == nil {
		return
	}
	dir, err := podpath.OpenDir(s.mounterDir())
	if err != nil {
		s.log.Warn("cannot hand the shared mount another pod's token", "key", key, "err", err)
		return
	}
	defer dir.Close()
	if _, err := credentials.Write(dir, key, next, s.cfg.SidecarUID, s.cfg.SidecarGID); err != nil {
		s.log.Warn("cannot hand the shared mount another pod's token", "key", key, "err", err)
		return
	}
	s.log.Info("shared mount's token handed to another pod of its key", "key", key, "identity", next.Identity, "tokenExpiry", next.TokenExpiry)
}

// sharedOps are the effects pkg/sharedmount asks for.
type sharedOps struct{ s *NodeServer }

func (o sharedOps) Bind(name, target string) error {
	return fusemount.Bind(o.s.sharedMountPath(name), target)
}

// Alive asks the mount's file system for its statistics, with a bound: gcsfuse answers
// that at once without GCS, a mount whose gcsfuse is gone answers ENOTCONN (connection
// aborted) or EIO (the mounter answering it in gcsfuse's place; it answers the root's
// attributes, so a stat would not tell).
func (o sharedOps) Alive(name string) bool {
	done := make(chan error, 1)
	go func() { // ends with the call; one stuck on a busy server is left to finish
		var st unix.Statfs_t
		done <- unix.Statfs(o.s.sharedMountPath(name), &st)
	}()
	select {
	case err := <-done:
		return !errors.Is(err, unix.ENOTCONN) && !errors.Is(err, unix.ECONNABORTED) && !errors.Is(err, unix.EIO)
	case <-time.After(aliveWait):
		return true
	}
}

// Stop ends the key's offer, unmounts its mount (its gcsfuse then exits cleanly) and
// removes its files.
func (o sharedOps) Stop(name string) error {
	s := o.s
	s.mu.Lock()
	offer := s.sharedOffers[name]
	delete(s.sharedOffers, name)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+s.cfg.UnmountBusyWait)
	defer cancel()
	if offer != nil {
		if err := offer.Stop(ctx); err != nil {
			s.log.Warn("shared hand-off did not stop in time", "key", name, "err", err)
		}
	}
	mnt := s.sharedMountPath(name)
	if err := fusemount.Unmount(ctx, mnt, s.cfg.UnmountBusyWait); err != nil {
		return err
	}
	if err := os.Remove(mnt); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("cannot remove a shared mount point", "path", mnt, "err", err)
	}
	s.removeSharedFiles(name)
	return nil
}

// removeSharedFiles removes a key's credential files from the mounter's directory.
func (s *NodeServer) removeSharedFiles(name string) {
	if dir, err := podpath.OpenDir(s.mounterDir()); err == nil {
		if err := podfiles.RemoveCredentials(dir, name); err != nil {
			s.log.Warn("cannot remove a shared mount's credential files", "key", name, "err", err)
		}
		dir.Close()
	}
}

// RecoverShared finds the shared mounts a previous node plugin made and the targets that
// bind them (by device number), so that they keep counting: a restart does not touch a
// serving mount. Returns how many keys it found.
func (s *NodeServer) RecoverShared() (int, error) {
	if s.shared == nil {
		return 0, nil
	}
	root := filepath.Join(s.cfg.SharedDir, sharedMountDir)
	mounts, err := fusemount.MountsUnder(root)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, mnt := range mounts {
		name := filepath.Base(mnt)
		if filepath.Dir(mnt) != root || !sharedmount.IsName(name) {
			continue
		}
		info, err := fusemount.Lookup(mnt)
		if err != nil || info == nil {
			continue
		}
		targets, err := fusemount.MountsOfDevice(filepath.Join(s.cfg.KubeletRoot, "pods"), info.Major, info.Minor)
		if err != nil {
			return n, err
		}
		var users []sharedmount.User
		for _, t := range targets {
			pt, err := podfiles.ParseTarget(s.cfg.KubeletRoot, t)
			if err != nil {
				continue // a subPath's bind of the target, not a target
			}
			users = append(users, sharedmount.User{Target: t, PodUID: pt.PodUID, Volume: pt.VolumeName})
		}
		s.shared.Restore(name, users)
		s.log.Info("shared mount found at start-up", "key", name, "targets", len(users))
		n++
	}
	return n, nil
}

// sharedRefusal is the error for a shared volume on a node plugin without the mounter.
func sharedRefusal(volume string) error {
	return status.Errorf(codes.FailedPrecondition,
		"volume %s asks for %s: %s, and this driver runs without the node's shared mounter (the chart's mounter.enabled is false, so the node plugin has no --shared-dir): enable it, or remove %s",
		volume, contract.AttrMountMode, contract.MountModeShared, contract.AttrMountMode)
}

// MetricSharedMountPods is 1 for every pod volume bound to a shared mount, labelled with
// the sharing key: the mounter's gcsfuse series carry the key as their volume label, so a
// join on it gives each pod's share.
const MetricSharedMountPods = "gcsfuse_csi_shared_mount_pods"

var sharedMountPodsDesc = prometheus.NewDesc(MetricSharedMountPods,
	"1 for each pod volume bound to a shared mount (mountMode: shared), by sharing key; the mounter's gcsfuse series carry the key as volume.",
	[]string{"key", "namespace", "pod", "volume"}, nil)

// SharedMetrics is the shared mounts' view for metrics: the mounter's metrics source (its
// directory and the keys it serves, for pkg/podmetrics; ok false without the shared mode)
// and a collector of MetricSharedMountPods.
func (s *NodeServer) SharedMetrics() (dir string, keys func() []string, users prometheus.Collector, ok bool) {
	if s.shared == nil {
		return "", nil, nil, false
	}
	keys = func() []string {
		snap := s.shared.Snapshot()
		out := make([]string, 0, len(snap))
		for k := range snap {
			out = append(out, k)
		}
		return out
	}
	return s.mounterDir(), keys, sharedUsersCollector{s}, true
}

type sharedUsersCollector struct{ s *NodeServer }

func (c sharedUsersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sharedMountPodsDesc }

func (c sharedUsersCollector) Collect(ch chan<- prometheus.Metric) {
	for key, users := range c.s.shared.Snapshot() {
		for _, u := range users {
			pod := c.s.podOf(u)
			ch <- prometheus.MustNewConstMetric(sharedMountPodsDesc, prometheus.GaugeValue, 1, key, pod.Namespace, pod.Name, u.Volume)
		}
	}
}
