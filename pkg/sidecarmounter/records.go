package sidecarmounter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// offerRecord is what a node plugin needs to mount and offer a volume again. It is written
// to Config.StateDir while the offer waits for the sidecar, and removed once taken.
type offerRecord struct {
	Target   string            `json:"target"`
	VolumeID string            `json:"volumeID"`
	PodUID   string            `json:"podUID"`
	Pod      nodevolume.PodRef `json:"pod"`
	Volume   handoff.Volume    `json:"volume"`
	NoExec   bool              `json:"noExec,omitempty"`
	NoAtime  bool              `json:"noAtime,omitempty"`
	// ReadAheadKB is the mount's kernel read-ahead (nil: the kernel's default).
	ReadAheadKB *int `json:"readAheadKB,omitempty"`
	// EIO: the node plugin answers this target with I/O errors itself (revive.go), not an
	// offer: a restarted node plugin serves it again.
	EIO bool `json:"eio,omitempty"`
}

// newOfferRecord is what a publish of r records, to mount and offer it again.
func newOfferRecord(req *csi.NodePublishVolumeRequest, r *nodevolume.Request) *offerRecord {
	return &offerRecord{Target: req.GetTargetPath(), VolumeID: req.GetVolumeId(), PodUID: r.Target.PodUID, Pod: r.Pod,
		Volume: r.Volume, NoExec: r.Opts.NoExec, NoAtime: r.Opts.NoAtime, ReadAheadKB: r.Opts.ReadAheadKB}
}

// recordDetachWait bounds the unmount of a dead mount found at start-up: nothing can be
// using a connection that answers ENOTCONN.
const recordDetachWait = 100 * time.Millisecond

// maxRecoverDepth is the depth of a stack of dead mounts at which Recover clears the target
// before mounting it again, rather than stacking one more (fusemount.Unmount removes 16).
const maxRecoverDepth = 8

func (m *Mounter) recordPath(target string) string { return m.recordPathFor(target, false) }

// recordPathFor is target's record: ".json" for an offer, ".eio" for a target the node
// plugin answers with I/O errors (revive.go). A release before the latter reads only
// ".json", so a downgrade never offers such a target to a sidecar that will not come back
// (the mount would wait unanswered).
func (m *Mounter) recordPathFor(target string, eio bool) string {
	sum := sha256.Sum256([]byte(target))
	ext := ".json"
	if eio {
		ext = ".eio"
	}
	return filepath.Join(m.cfg.StateDir, hex.EncodeToString(sum[:12])+ext)
}

// saveRecord records rec in StateDir. It writes through podpath.WriteFileAtomic, whose temp
// file is unique to the call (a dot name that Recover skips): two saves of one target at
// once must not write into or rename each other's temp file.
func (m *Mounter) saveRecord(rec *offerRecord) error {
	if m.cfg.StateDir == "" {
		return nil
	}
	if err := os.MkdirAll(m.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("create offer record directory: %w", err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode offer record of %s: %w", rec.Target, err)
	}
	dir, err := podpath.OpenDir(m.cfg.StateDir)
	if err != nil {
		return fmt.Errorf("open offer record directory: %w", err)
	}
	defer dir.Close()
	if err := podpath.WriteFileAtomic(dir, filepath.Base(m.recordPathFor(rec.Target, rec.EIO)), b, 0o600); err != nil {
		return fmt.Errorf("save offer record of %s: %w", rec.Target, err)
	}
	return nil
}

func (m *Mounter) dropRecord(target string) {
	if m.cfg.StateDir == "" {
		return
	}
	for _, eio := range []bool{false, true} {
		if err := os.Remove(m.recordPathFor(target, eio)); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.cfg.Log.Warn("cannot remove offer record", "target", target, "err", err)
		}
	}
}

// Recover runs at start-up. An offer recorded but never taken means the previous node
// plugin died holding the only copy of that mount's FUSE descriptor: the mount is dead
// (ENOTCONN) and the kubelet will not publish it again. So the dead mount is detached and
// the volume mounted and offered anew, for the sidecar that has not connected yet.
// Returns how many volumes were offered again.
func (m *Mounter) Recover(ctx context.Context) (int, error) {
	if m.cfg.StateDir == "" {
		return 0, nil
	}
	entries, err := os.ReadDir(m.cfg.StateDir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read offer records: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); ext != ".json" && ext != ".eio" {
			continue
		}
		p := filepath.Join(m.cfg.StateDir, e.Name())
		b, err := os.ReadFile(p)
		var rec offerRecord
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err == nil {
			err = rec.Volume.Validate()
		}
		if err != nil || p != m.recordPathFor(rec.Target, rec.EIO) {
			errs = append(errs, fmt.Errorf("offer record %s unusable: %v", e.Name(), err))
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove unusable offer record: %w", err))
			}
			continue
		}
		ok, err := m.recoverOne(ctx, &rec)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func (m *Mounter) recoverOne(ctx context.Context, rec *offerRecord) (bool, error) {
	log := m.cfg.Log.With("pod", rec.Pod.Namespace+"/"+rec.Pod.Name, "podUID", rec.PodUID, "volume", rec.Volume.VolumeName)
	end, err := m.cfg.Store.Begin(rec.Target)
	if err != nil {
		return false, err
	}
	defer end()
	info, err := fusemount.Lookup(rec.Target)
	if err != nil {
		return false, err
	}
	if info == nil || info.FSType != fusemount.FSType {
		m.dropRecord(rec.Target) // unpublished meanwhile
		return false, nil
	}
	dead, err := fusemount.Dead(ctx, rec.Target, fusemount.ProbeTimeout)
	if err != nil {
		return false, err
	}
	if !dead {
		// The sidecar took the descriptor just before the old process ended.
		m.dropRecord(rec.Target)
		return false, nil
	}
	// On top of the dead mount, never after unmounting it: a container created in between
	// would bind the bare directory. Only a stack that node plugins restarting in a loop
	// made deep is cleared first (fusemount.Unmount removes at most maxRecoverDepth more).
	if depth, err := fusemount.Depth(rec.Target); err != nil {
		return false, err
	} else if depth >= maxRecoverDepth {
		log.Warn("dead mounts stacked deep at the target; detaching them before mounting again", "depth", depth)
		if err := fusemount.Unmount(ctx, rec.Target, recordDetachWait); err != nil {
			return false, fmt.Errorf("detach dead mounts %s: %w", rec.Target, err)
		}
	}
	if rec.EIO {
		if err := m.serveEIO(rec); err != nil {
			m.dropRecord(rec.Target)
			return false, fmt.Errorf("answer %s with I/O errors again: %w", rec.Target, err)
		}
		m.cfg.Store.Remember(rec.Target, nodevolume.Publication{VolumeID: rec.VolumeID, Volume: rec.Volume})
		log.Info("answering again with I/O errors a volume whose sidecar died before the previous node plugin ended")
		return true, nil
	}
	if err := m.mountAndOffer(ctx, rec, nil, log); err != nil {
		m.dropRecord(rec.Target)
		return false, fmt.Errorf("offer %s again: %w", rec.Target, err)
	}
	m.cfg.Store.Remember(rec.Target, nodevolume.Publication{VolumeID: rec.VolumeID, Volume: rec.Volume})
	log.Info("offered again a volume whose descriptor died with the previous node plugin")
	return true, nil
}
