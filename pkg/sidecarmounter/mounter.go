// Package sidecarmounter is the Node service's mounter of the sidecar mode: each target is
// a FUSE mount of its own whose descriptor is offered to the pod's sidecar in the pod's
// gcsfuse-tmp emptyDir (mountAndOffer). Offers not taken yet are recorded on disk, so that
// a restarted node plugin offers them again (records.go); the sidecar's reports become
// logs, Events and metrics (status.go).
package sidecarmounter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// Mode names the sidecar mounter's mode.
const Mode = "sidecar"

// offerStopTimeout bounds the stop of a target's offer at its unpublish.
const offerStopTimeout = 2 * time.Second

// Config is what the sidecar mounter needs of the node plugin.
type Config struct {
	// UID and GID own hand-off sockets and the FUSE connection (the sidecar's user).
	UID, GID int
	// UnmountBusyWait is how long a busy mount is retried before a lazy unmount (> 0).
	UnmountBusyWait time.Duration
	// StateDir keeps a record of each offer the sidecar has not taken yet (records.go;
	// empty: no records).
	StateDir string
	// OnTerminating, if set, is called each time a sidecar reports handoff.StateTerminating
	// (once per volume), and returns whether this is the pod's first report, which records
	// the SidecarDraining Event (without a hook every report records one). It is called
	// from the volume's hand-off goroutine and must not block.
	OnTerminating func(pod nodevolume.PodRef) (first bool)
	// Store is the node's state store (required); Files writes the volumes' files
	// (required).
	Store nodevolume.Store
	Files *nodevolume.Files
	// Pods looks up a pod in the node plugin's cache (nil: none): a target whose sidecar
	// died without a word is mounted again only for a pod it knows (revive.go).
	Pods nodevolume.PodLookup
	// Metrics records the sidecars' reports (nil: nothing); Events and Log may be nil.
	Metrics nodevolume.StatusRecorder
	Events  nodevolume.EventSink
	Log     *slog.Logger
}

// Mounter is the sidecar mode's nodevolume.Mounter.
type Mounter struct {
	cfg     Config
	revived revivals
}

// New checks cfg and returns the sidecar mounter.
func New(cfg Config) (*Mounter, error) {
	switch {
	case cfg.UID < 0 || cfg.GID < 0:
		return nil, fmt.Errorf("sidecar mounter: uid/gid %d/%d must not be negative", cfg.UID, cfg.GID)
	case cfg.UnmountBusyWait <= 0:
		return nil, fmt.Errorf("sidecar mounter: unmount busy wait %s must be positive", cfg.UnmountBusyWait)
	case cfg.StateDir != "" && !filepath.IsAbs(cfg.StateDir):
		return nil, fmt.Errorf("sidecar mounter: state directory %q is not an absolute path", cfg.StateDir)
	case cfg.Store == nil || cfg.Files == nil:
		return nil, errors.New("sidecar mounter: a store and the volume files are required")
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nodevolume.NoStatus{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Mounter{cfg: cfg, revived: revivals{times: map[string][]time.Time{}, eio: map[string]*eioServer{}, probes: make(chan struct{}, maxProbes), pending: map[string]*offerRecord{}, probed: map[string]time.Time{}}}, nil
}

func (m *Mounter) Mode() string                    { return Mode }
func (m *Mounter) Admit(*nodevolume.Request) error { return nil }
func (m *Mounter) NeedsSidecar() bool              { return true }

// Owns is never asked: the sidecar mounter has whatever the shared one does not.
func (m *Mounter) Owns(string) bool { return true }

// Publish writes the volume's files, mounts the target and offers its descriptor.
func (m *Mounter) Publish(ctx context.Context, req *csi.NodePublishVolumeRequest, r *nodevolume.Request, log *slog.Logger) error {
	rec := newOfferRecord(req, r)
	// The credential files and the CA bundle exist before the sidecar can be offered the
	// volume.
	if _, err := m.cfg.Files.WriteCredentials(r); err != nil {
		return err
	}
	if err := m.cfg.Files.WriteCABundle(r); err != nil {
		return err
	}
	if err := m.mountAndOffer(ctx, rec, nil, log); err != nil {
		return err
	}
	log.Info("volume mounted; descriptor offered to sidecar", "readOnly", rec.Volume.ReadOnly, "flags", rec.Volume.Flags)
	return nil
}

// Refresh writes the volume's credential files again (a fresh token). For a target this
// process did not publish, it also looks for a mount left dead by a sidecar that died while
// the node plugin was down (revive.go).
func (m *Mounter) Refresh(ctx context.Context, req *csi.NodePublishVolumeRequest, r *nodevolume.Request) (credentials.Written, error) {
	w, err := m.cfg.Files.WriteCredentials(r)
	if err != nil {
		return w, err
	}
	target := req.GetTargetPath()
	if _, known := m.cfg.Store.Publication(target); !known && target != "" && r.Target.PodUID != "" && r.Opts != nil &&
		m.republishProbeDue(target) {
		if info, err := fusemount.Lookup(target); err == nil && info != nil && info.FSType == fusemount.FSType {
			log := m.cfg.Log.With("pod", r.Pod.Namespace+"/"+r.Pod.Name, "podUID", r.Target.PodUID, "volume", r.Target.VolumeName)
			m.reviveAtRepublish(ctx, newOfferRecord(req, r), log)
		}
	}
	return w, nil
}

// Unpublish stops the offer, unmounts (lazily if still busy after a bounded wait), removes
// the target, its offer record and its credential files.
func (m *Mounter) Unpublish(ctx context.Context, target string, log *slog.Logger) error {
	if offer := m.cfg.Store.TakeOffer(target); offer != nil {
		stopCtx, cancel := context.WithTimeout(ctx, offerStopTimeout)
		if err := offer.Stop(stopCtx); err != nil {
			log.Warn("hand-off did not stop in time", "err", err)
		}
		cancel()
	}
	// Every layer: a target mounted again (revive.go) has its dead mount under the new one.
	if err := nodevolume.UnmountTarget(ctx, target, m.cfg.UnmountBusyWait); err != nil {
		return err
	}
	m.stopEIO(target)
	m.Forget(target)
	return nil
}

// Forget removes what the sidecar mode keeps of an unmounted target: its offer record and
// its credential files.
func (m *Mounter) Forget(target string) {
	m.forgetPending(target)
	m.dropRecord(target)
	m.cfg.Files.RemoveCredentials(target)
}

// mountOptions are the kernel-level options of rec's mount.
func (m *Mounter) mountOptions(rec *offerRecord) fusemount.Options {
	return fusemount.Options{
		Source: rec.Volume.Bucket, ReadOnly: rec.Volume.ReadOnly, NoExec: rec.NoExec, NoAtime: rec.NoAtime,
		UserID: m.cfg.UID, GroupID: m.cfg.GID,
	}
}

// mountAndOffer mounts rec.Target with a new FUSE connection (on top of a dead one there:
// revive.go), offers it in the pod's hand-off directory and keeps the offer; onTaken, if
// set, is called once the sidecar has it. The caller holds the target's lock and records
// the publication.
func (m *Mounter) mountAndOffer(ctx context.Context, rec *offerRecord, onTaken func(), log *slog.Logger) error {
	publishedAt := time.Now()
	emptyDir, err := m.cfg.Files.OpenEmptyDir(rec.PodUID)
	if err != nil {
		return err
	}
	handoffDir, err := podfiles.CreateHandoffDir(emptyDir)
	emptyDir.Close()
	if err != nil {
		return status.Errorf(codes.Internal, "prepare hand-off directory: %v", err)
	}
	if err := os.Mkdir(rec.Target, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		handoffDir.Close()
		return status.Errorf(codes.Internal, "create target %s: %v", rec.Target, err)
	}
	fuse, err := fusemount.Mount(rec.Target, m.mountOptions(rec))
	if err != nil {
		handoffDir.Close()
		return status.Errorf(codes.Internal, "volume %s: %v", rec.Volume.VolumeName, err)
	}
	// Until the sidecar takes the descriptor, only this process holds it: if the node
	// plugin restarts in between, the record lets the new one mount and offer again.
	if err := m.saveRecord(rec); err != nil {
		log.Warn("cannot record the pending offer; a restart before the sidecar connects would lose it", "err", err)
	}
	vol := rec.Volume
	seen := &streamSeen{}
	// Pending before the offer exists: its hand-off (OnHandedOff) may come at once.
	m.revived.mu.Lock()
	m.revived.pending[rec.Target] = rec
	m.revived.mu.Unlock()
	onStatus := m.statusHandler(rec, publishedAt, log)
	offer, err := handoff.NewOffer(handoff.OfferConfig{
		Dir: handoffDir, Volume: &vol, Fuse: fuse, UID: m.cfg.UID, GID: m.cfg.GID,
		OnHandedOff: func() {
			m.dropRecord(rec.Target)
			m.forgetPending(rec.Target)
			if onTaken != nil {
				onTaken()
			}
		},
		OnStatus: func(st *handoff.Status) {
			seen.saw(st)
			onStatus(st)
		},
		// The sidecar closed its stream: if it died without a word, the mount is dead and
		// is mounted again (revive.go).
		OnStatusEnd: func() { m.sidecarGone(rec, seen, log) },
		Log:         log,
	})
	if err != nil {
		fuse.Close()
		handoffDir.Close()
		m.dropRecord(rec.Target)
		m.forgetPending(rec.Target)
		// This mount alone: one stacked on a dead mount (revive.go, Recover) leaves that one
		// in place, never a bare directory a new container could bind.
		uerr := fusemount.UnmountTop(rec.Target)
		return status.Errorf(codes.Internal, "volume %s: offer descriptor to sidecar: %v", rec.Volume.VolumeName, errors.Join(err, uerr))
	}
	m.cfg.Store.PutOffer(rec.Target, offer)
	return nil
}

// statusHandler is the offer's OnStatus for rec's volume, published at publishedAt: each
// report goes to the metrics, a start applies the volume's read-ahead, and onStatus makes
// it logs and Events.
func (m *Mounter) statusHandler(rec *offerRecord, publishedAt time.Time, log *slog.Logger) func(*handoff.Status) {
	vol := rec.Volume
	return func(st *handoff.Status) {
		m.cfg.Metrics.Status(st, publishedAt)
		if st.State == handoff.StateStarted {
			nodevolume.ApplyReadAhead(rec.Target, rec.ReadAheadKB, rec.Pod, vol.VolumeName, m.cfg.Events, log)
		}
		m.onStatus(rec.Pod, vol, st, log)
	}
}
