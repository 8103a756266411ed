package csidriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// sidecarMounter is the mounter of the sidecar mode: a FUSE mount of the pod's target whose
// descriptor is offered to the pod's own sidecar, in its gcsfuse-tmp emptyDir (mountAndOffer;
// recovery.go offers again what a restart left untaken).
type sidecarMounter struct {
	s *NodeServer
	// offers are the published targets' offers, by target, until unpublished.
	mu     sync.Mutex
	offers map[string]*handoff.Offer
}

func newSidecarMounter(s *NodeServer) *sidecarMounter {
	return &sidecarMounter{s: s, offers: map[string]*handoff.Offer{}}
}

// modeSidecar names the sidecar mounter's mode.
const modeSidecar = "sidecar"

func (m *sidecarMounter) mode() string         { return modeSidecar }
func (m *sidecarMounter) admit(*request) error { return nil }
func (m *sidecarMounter) needsSidecar() bool   { return true }

// owns is never asked: the sidecar mounter has whatever the shared one does not.
func (m *sidecarMounter) owns(string) bool { return true }

func (m *sidecarMounter) publish(ctx context.Context, req *csi.NodePublishVolumeRequest, r *request, log *slog.Logger) error {
	s := m.s
	rec := &offerRecord{Target: req.GetTargetPath(), VolumeID: req.GetVolumeId(), PodUID: r.target.PodUID, Pod: r.pod,
		Volume: r.volume, NoExec: r.opts.NoExec, NoAtime: r.opts.NoAtime, ReadAheadKB: r.opts.ReadAheadKB}
	// The credential files and the CA bundle exist before the sidecar can be offered the
	// volume.
	if _, err := s.writeCredentials(r); err != nil {
		return err
	}
	if err := s.writeCABundle(r); err != nil {
		return err
	}
	if err := s.mountAndOffer(ctx, rec, log); err != nil {
		return err
	}
	log.Info("volume mounted; descriptor offered to sidecar", "readOnly", rec.Volume.ReadOnly, "flags", rec.Volume.Flags)
	return nil
}

// refresh writes the volume's credential files again (a fresh token).
func (m *sidecarMounter) refresh(_ context.Context, _ *csi.NodePublishVolumeRequest, r *request) (credentials.Written, error) {
	return m.s.writeCredentials(r)
}

// unpublish stops the offer, unmounts (lazily if still busy after a bounded wait), removes
// the target, its offer record and its credential files.
func (m *sidecarMounter) unpublish(ctx context.Context, target string, log *slog.Logger) error {
	m.mu.Lock()
	offer := m.offers[target]
	delete(m.offers, target)
	m.mu.Unlock()
	if offer != nil {
		stopCtx, cancel := context.WithTimeout(ctx, offerStopTimeout)
		if err := offer.Stop(stopCtx); err != nil {
			log.Warn("hand-off did not stop in time", "err", err)
		}
		cancel()
	}
	if err := m.s.unmountTarget(ctx, target); err != nil {
		return err
	}
	m.s.dropOffer(&offerRecord{Target: target})
	m.s.removeCredentials(target)
	return nil
}

// keepOffer records target's offer, for its unpublish.
func (m *sidecarMounter) keepOffer(target string, o *handoff.Offer) {
	m.mu.Lock()
	m.offers[target] = o
	m.mu.Unlock()
}

// offerStopTimeout bounds the stop of a target's offer at its unpublish.
const offerStopTimeout = 2 * time.Second

// mountAndOffer mounts rec.Target with a new FUSE connection, offers it in the pod's
// hand-off directory and keeps the offer. The caller holds the target's lock and records
// the publication.
func (s *NodeServer) mountAndOffer(ctx context.Context, rec *offerRecord, log *slog.Logger) error {
	publishedAt := time.Now()
	emptyDir, err := s.openEmptyDir(rec.PodUID)
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
	fuse, err := fusemount.Mount(rec.Target, fusemount.Options{
		Source: rec.Volume.Bucket, ReadOnly: rec.Volume.ReadOnly, NoExec: rec.NoExec, NoAtime: rec.NoAtime,
		UserID: s.cfg.SidecarUID, GroupID: s.cfg.SidecarGID,
	})
	if err != nil {
		handoffDir.Close()
		return status.Errorf(codes.Internal, "volume %s: %v", rec.Volume.VolumeName, err)
	}
	// Until the sidecar takes the descriptor, only this process holds it: if the node
	// plugin restarts in between, the record lets the new one mount and offer again.
	if err := s.saveOffer(rec); err != nil {
		log.Warn("cannot record the pending offer; a restart before the sidecar connects would lose it", "err", err)
	}
	vol := rec.Volume
	offer, err := handoff.NewOffer(handoff.OfferConfig{
		Dir: handoffDir, Volume: &vol, Fuse: fuse, UID: s.cfg.SidecarUID, GID: s.cfg.SidecarGID,
		OnHandedOff: func() { s.dropOffer(rec) },
		OnStatus: func(st *handoff.Status) {
			s.cfg.Metrics.status(st, publishedAt)
			if st.State == handoff.StateStarted {
				s.applyReadAhead(rec, log)
			}
			s.onStatus(rec.Pod, vol, st, log)
		},
		Log: log,
	})
	if err != nil {
		fuse.Close()
		handoffDir.Close()
		s.dropOffer(rec)
		uerr := fusemount.Unmount(ctx, rec.Target, s.cfg.UnmountBusyWait)
		return status.Errorf(codes.Internal, "volume %s: offer descriptor to sidecar: %v", rec.Volume.VolumeName, errors.Join(err, uerr))
	}
	s.offers.keepOffer(rec.Target, offer)
	return nil
}

// applyReadAhead sets the mount's kernel read-ahead when the volume asks for one
// (read_ahead_kb). It runs once gcsfuse has answered the kernel: at that answer the kernel
// lowers the read-ahead to what gcsfuse allows (1 MiB), so a value set at mount time would not
// hold. A failure leaves the mount serving with the kernel's default, and says so.
func (s *NodeServer) applyReadAhead(rec *offerRecord, log *slog.Logger) {
	if rec.ReadAheadKB == nil {
		return
	}
	if err := fusemount.SetReadAhead(rec.Target, *rec.ReadAheadKB); err != nil {
		log.Warn("cannot apply read_ahead_kb; the mount keeps the kernel's read-ahead", "err", err)
		s.event(rec.Pod, true, contract.EventReadAheadFailed, fmt.Sprintf("volume %s: read_ahead_kb=%d not applied: %v", rec.Volume.VolumeName, *rec.ReadAheadKB, err))
		return
	}
	log.Info("read-ahead set", "readAheadKB", *rec.ReadAheadKB)
}
