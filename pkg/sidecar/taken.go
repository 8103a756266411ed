package sidecar

import (
	"os"
	"sort"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// adoptPredecessor reports the volumes a previous container of this sidecar took and that
// are not offered again (no hand-off socket): their gcsfuse died with that container and
// their mounts answer ENOTCONN. They count as failed (exit 1 at the usual end, reasons in
// the termination message: lostVolumes), unless this container takes them again, offered
// later (the node plugin mounts a dead target again for a restarted sidecar: the offer can
// come after this start); the sidecar stays up for the volumes that still serve or are
// still offered, instead of crash-looping or cutting them.
func (s *Sidecar) adoptPredecessor(tmp *os.File) {
	recs, err := podfiles.ReadTaken(tmp)
	if err != nil {
		s.log.Warn("cannot read the taken records of a previous sidecar container", "err", err)
		return
	}
	if len(recs) == 0 {
		return
	}
	var offeredNow func(string) bool
	if hd, err := podfiles.OpenHandoffDir(s.cfg.TmpDir); err == nil {
		defer hd.Close()
		offeredNow = func(v string) bool {
			ok, err := podfiles.HandoffSocketPresent(hd, v)
			return err == nil && ok
		}
	} else {
		offeredNow = func(string) bool { return false }
	}
	names := make([]string, 0, len(recs))
	for v := range recs {
		names = append(names, v)
	}
	sort.Strings(names)
	for _, v := range names {
		r := recs[v]
		if offeredNow(v) {
			s.log.Info("volume taken by a previous sidecar container is offered again; taking it", "volume", v, "bucket", r.Bucket)
			continue
		}
		reason := "gcsfuse died with a previous container of the sidecar"
		if !r.TakenAt.IsZero() {
			reason += " (took the volume at " + r.TakenAt.UTC().Format(time.RFC3339) + ")"
		}
		res := exitResult{Volume: v, Bucket: r.Bucket, Reason: reason}
		s.lost[v] = res.describe()
		s.log.Error("volume lost with the previous sidecar container: its mount fails with ENOTCONN unless the node plugin mounts it again; the other volumes keep serving and the sidecar exits 1 when told to end",
			"volume", v, "bucket", r.Bucket, "takenAt", r.TakenAt)
		if s.cfg.Mode == contract.ModeShared {
			// Reported once: the node's mounter outlives its volumes, each mount a new
			// name, so a record left here would be reported at every restart, for ever.
			s.removeVolumeDirs(v)
		}
	}
}

// lostVolumes describes, sorted, the volumes lost with a previous container that this one
// has not taken again.
func (s *Sidecar) lostVolumes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for v, why := range s.lost {
		if s.taken[v] {
			s.log.Info("volume lost with the previous sidecar container was mounted again and taken; not counted as failed", "volume", v)
			continue
		}
		out = append(out, why)
	}
	sort.Strings(out)
	return out
}
