// Package sharedmounter is the Node service's mounter of the shared mode (mountMode:
// shared): the node plugin mounts one FUSE connection per sharing key under Config.Dir,
// offers it to the node's mounter (the sidecar binary in ModeShared, one per node) exactly
// as the sidecar mode offers a pod's volume to the pod's sidecar, and bind-mounts it on
// every target of that key. pkg/sharedmount decides when a key's mount starts and stops;
// this package does it (shared.go), finds the mounts again after a restart and watches them
// (watch.go), and removes the shared directory when nothing uses it (cleanup.go).
package sharedmounter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
)

// Config is what the shared mounter needs of the node plugin.
type Config struct {
	// Dir is where the shared mounts and the node mounter's directory are (absolute).
	Dir string
	// MounterTmpPath is where the node's mounter sees its directory (Dir/mounter):
	// contract.TmpMountPath, where the chart mounts it, unless tests run the mounter on the
	// host's paths.
	MounterTmpPath string
	// KubeletRoot is the kubelet's root directory (/var/lib/kubelet): recovery finds the
	// targets that bind a mount under it.
	KubeletRoot string
	// UID and GID own hand-off sockets, the FUSE connections and the mounter's directory.
	UID, GID int
	// UnmountBusyWait is how long a busy mount is retried before a lazy unmount (> 0).
	UnmountBusyWait time.Duration
	// Linger is how long a mount outlives the last pod that used it (0:
	// sharedmount.DefaultLinger); OfferWait bounds the wait for the mounter to take a new
	// mount (0: DefaultOfferWait).
	Linger, OfferWait time.Duration
	// ADC are the namespaces whose shared volumes may read with the mounter's Application
	// Default Credentials; Credentials is the node's credentials configuration for shared
	// volumes (credentials.Config.ForShared).
	ADC         credentials.SharedADC
	Credentials credentials.Config
	// Unbound, if set, cleans up after Unpublish of a target the table does not bind (the
	// node's other mounter's records and files); nil: the pod's credential files only.
	Unbound func(target string)
	// Pods, if set, names a pod found at start-up and checks a volume context's namespace.
	Pods nodevolume.PodLookup
	// Store is the node's state store and Files writes the volumes' files (both required).
	Store nodevolume.Store
	Files *nodevolume.Files
	// Metrics records the mounter's reports (nil: nothing); Events and Log may be nil.
	Metrics nodevolume.StatusRecorder
	Events  nodevolume.EventSink
	Log     *slog.Logger
}

// Mounter is the shared mode's nodevolume.Mounter.
type Mounter struct {
	cfg   Config
	table *sharedmount.Table

	mu sync.Mutex
	// ended is the mounter's report of each mount whose gcsfuse ended, by mount, until the
	// mount is stopped: a pod bound as it ended is told too.
	ended map[string]*handoff.Status
	// starting is when the mounter took each mount whose gcsfuse has not reported yet, by
	// mount (ops.Alive).
	starting map[string]time.Time
	// recovered watches the mounts found at start-up, which have no status stream
	// (watch.go); nil when there are none.
	recovered *recoveredWatch
	// statfs is how Alive asks a mount for its statistics (nil: unix.Statfs). A seam for
	// tests alone: what Alive must tell apart (a starting gcsfuse's mount, whose statfs the
	// kernel holds until gcsfuse answers its INIT; a dead one's ENOTCONN) needs root and a
	// real FUSE mount otherwise.
	statfs func(path string, st *unix.Statfs_t) error

	// gate is held shared by every publish for its duration, and exclusively by CleanUp,
	// which then sets closed: no publish mounts under the shared directory while it is
	// removed, one the gRPC server's stop left running included.
	gate   sync.RWMutex
	closed bool // under gate
}

// MounterDir is the node mounter's directory under a shared directory.
func MounterDir(dir string) string { return filepath.Join(dir, sharedMounterDir) }

// New checks cfg, makes the shared directory and the mounter's, and returns the mounter.
func New(cfg Config) (*Mounter, error) {
	switch {
	case !filepath.IsAbs(cfg.Dir):
		return nil, fmt.Errorf("shared mounter: shared directory %q is not an absolute path", cfg.Dir)
	case !filepath.IsAbs(cfg.KubeletRoot):
		return nil, fmt.Errorf("shared mounter: kubelet root %q is not an absolute path", cfg.KubeletRoot)
	case cfg.MounterTmpPath == "":
		return nil, errors.New("shared mounter: the mounter's path of its directory is empty")
	case cfg.UID < 0 || cfg.GID < 0:
		return nil, fmt.Errorf("shared mounter: uid/gid %d/%d must not be negative", cfg.UID, cfg.GID)
	case cfg.UnmountBusyWait <= 0:
		return nil, fmt.Errorf("shared mounter: unmount busy wait %s must be positive", cfg.UnmountBusyWait)
	case cfg.Linger < 0:
		return nil, fmt.Errorf("shared mounter: linger %s is negative", cfg.Linger)
	case cfg.OfferWait < 0:
		return nil, fmt.Errorf("shared mounter: offer wait %s is negative", cfg.OfferWait)
	case cfg.Store == nil || cfg.Files == nil:
		return nil, errors.New("shared mounter: a store and the volume files are required")
	}
	if cfg.Linger == 0 {
		cfg.Linger = sharedmount.DefaultLinger
	}
	if cfg.OfferWait == 0 {
		cfg.OfferWait = DefaultOfferWait
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nodevolume.NoStatus{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	m := &Mounter{cfg: cfg, ended: map[string]*handoff.Status{}, starting: map[string]time.Time{}}
	if err := m.prepareSharedDir(); err != nil {
		return nil, err
	}
	t, err := sharedmount.New(ops{m}, cfg.Linger, cfg.Log)
	if err != nil {
		return nil, err
	}
	m.table = t
	return m, nil
}

// Close stops the recovered mounts' watch and the table's timers; the mounts keep serving
// (a restarted node plugin finds them, Recover).
func (m *Mounter) Close() {
	m.mu.Lock()
	w := m.recovered
	m.recovered = nil
	m.mu.Unlock()
	if w != nil {
		w.close()
	}
	m.table.Close()
}

func (m *Mounter) Mode() string       { return contract.ModeShared }
func (m *Mounter) NeedsSidecar() bool { return false }

// Owns reports whether the table binds target, one found at start-up included.
func (m *Mounter) Owns(target string) bool { return m.table.NameOf(target) != "" }

// Publish binds the target to its key's mount, starting one when the key has none that
// serves.
func (m *Mounter) Publish(ctx context.Context, req *csi.NodePublishVolumeRequest, r *nodevolume.Request, log *slog.Logger) error {
	return m.publishShared(ctx, r, req.GetTargetPath(), req.GetVolumeContext(), req.GetSecrets(), log)
}

// event records an Event on pod.
func (m *Mounter) event(pod nodevolume.PodRef, warning bool, reason, msg string) {
	nodevolume.PodEventTo(m.cfg.Events, pod, warning, reason, msg)
}

// Refresh writes the pod's fresh token into its mount's files, which the mounter reads,
// under the key's lock: never beside the mount's stop.
func (m *Mounter) Refresh(_ context.Context, req *csi.NodePublishVolumeRequest, r *nodevolume.Request) (credentials.Written, error) {
	target := req.GetTargetPath()
	var w credentials.Written
	bound, err := m.table.WithTarget(target, func(mount string) error {
		// A republish that would change who reads (the Secret now holding another
		// service account's key) must not write its credentials into a mount other pods
		// share; a rotated key of the same account is the same reader.
		if prev, ok := m.sharedPlanOf(target); ok && principal(prev) != principal(r.Creds) {
			return status.Errorf(codes.AlreadyExists, "target %s is already published for %s; this publish is for %s (shared mount %s)",
				target, principal(prev), principal(r.Creds), mount)
		}
		if err := m.useSharedKey(r, mount, req.GetVolumeContext(), req.GetSecrets()); err != nil {
			return err
		}
		m.rememberPlan(target, r)
		var werr error
		w, werr = m.cfg.Files.WriteCredentials(r)
		return werr
	})
	if err != nil || bound {
		return w, err
	}
	// Unbound meanwhile (it is not: the caller holds the target's lock): the pod's own files.
	return m.cfg.Files.WriteCredentials(r)
}

// Unpublish unmounts the target's bind and unbinds it from its key: the key's mount
// lingers (Config.Linger) once no target is bound, and another pod's token is handed
// to it when this pod's carried it (handOverToken).
func (m *Mounter) Unpublish(ctx context.Context, target string, log *slog.Logger) error {
	start := time.Now()
	if err := nodevolume.UnmountTarget(ctx, target, m.cfg.UnmountBusyWait); err != nil {
		return err
	}
	if name, remaining := m.table.Unbound(target, func(mount string, _ int) { m.handOverToken(target, mount) }); name != "" {
		log.Info("shared volume unbound", "mount", name, "stillBound", remaining, "ms", time.Since(start).Milliseconds())
		return nil
	}
	// Not bound (never: the caller holds the target's lock and asked Owns): cleaned up as
	// any target.
	if m.cfg.Unbound != nil {
		m.cfg.Unbound(target)
	} else {
		m.cfg.Files.RemoveCredentials(target)
	}
	return nil
}

// Admit refuses a new shared publish that would read with the mounter's
// Application Default Credentials for a pod outside Config.ADC (PermissionDenied,
// credentials.SharedADCRefusal). Only a new one: a republish of a target already mounted
// (every minute with requiresRepublish) keeps what its first publish was allowed, so that
// narrowing the namespaces never turns a running pod's republishes into a Warning a minute.
// The namespace is the kubelet's (podInfoOnMount), checked against the pod watcher's where it
// knows the pod, since an inline volume's attributes could carry another.
func (m *Mounter) Admit(r *nodevolume.Request) error {
	if !r.Opts.Shared || r.Creds.Kind != credentials.KindADC {
		return nil
	}
	ns := r.Pod.Namespace
	if m.cfg.Pods != nil {
		if p, ok := m.cfg.Pods(r.Pod.UID); ok && p.Namespace != ns {
			return status.Errorf(codes.PermissionDenied, "volume %s: the volume context names namespace %q, the pod %s is in %q", r.Target.VolumeName, ns, r.Pod.UID, p.Namespace)
		}
	}
	if !m.cfg.ADC.Allows(ns) {
		return status.Error(codes.PermissionDenied, credentials.SharedADCRefusal(r.Target.VolumeName, ns))
	}
	return nil
}
