package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// takenMaxSize bounds what is read back from a taken record (the directory is pod-writable).
const takenMaxSize = 4096

// takenRecord is "<TmpDir>/<VolumesDir>/<volume>/<TakenFile>": this sidecar container took
// the volume's descriptor. The emptyDir outlives the container, so when the kubelet
// restarts the sidecar (native restartPolicy Always, legacy under OnFailure/Always) the new
// container learns which mounts died with the old one: the node plugin will not offer them
// again, and without the record the new sidecar would neither serve nor report them.
type takenRecord struct {
	Bucket  string    `json:"bucket"`
	TakenAt time.Time `json:"takenAt"`
}

// volumeDir opens (creating it if missing) the volume's directory under the pinned TmpDir,
// without following symlinks at either level.
func volumeDir(tmp *os.File, volume string) (*os.File, error) {
	vols, err := podpath.MkdirOpen(tmp, contract.VolumesDir, 0o700)
	if err != nil {
		return nil, err
	}
	defer vols.Close()
	return podpath.MkdirOpen(vols, volume, 0o700)
}

// writeTaken records (or replaces the record) that this container took volume.
func writeTaken(tmp *os.File, volume string, r takenRecord) error {
	d, err := volumeDir(tmp, volume)
	if err != nil {
		return fmt.Errorf("taken record of %s: %w", volume, err)
	}
	defer d.Close()
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode taken record of %s: %w", volume, err)
	}
	return podpath.WriteFileAtomic(d, contract.TakenFile, b, 0o600)
}

// removeTaken forgets volume: the node plugin unmounted it, its end is not a loss.
func removeTaken(tmp *os.File, volume string) error {
	d, err := volumeDir(tmp, volume)
	if err != nil {
		return fmt.Errorf("taken record of %s: %w", volume, err)
	}
	defer d.Close()
	return podpath.Remove(d, contract.TakenFile)
}

// readTaken returns the taken records under the pinned TmpDir by volume name. Entries that
// are not volume directories, or whose record is missing, are skipped; an unreadable record
// still counts (with what could be read) since the volume was taken.
func readTaken(tmp *os.File) (map[string]takenRecord, error) {
	vols, err := podpath.MkdirOpen(tmp, contract.VolumesDir, 0o700)
	if err != nil {
		return nil, err
	}
	defer vols.Close()
	entries, err := vols.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", contract.VolumesDir, err)
	}
	out := map[string]takenRecord{}
	for _, e := range entries {
		if !e.IsDir() || !contract.ValidVolumeName(e.Name()) {
			continue
		}
		d, err := podpath.MkdirOpen(vols, e.Name(), 0o700)
		if err != nil {
			continue
		}
		b, err := podpath.ReadFile(d, contract.TakenFile, takenMaxSize)
		d.Close()
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var r takenRecord
		if err == nil {
			_ = json.Unmarshal(b, &r) // a garbled record still says the volume was taken
		}
		out[e.Name()] = r
	}
	return out, nil
}

// adoptPredecessor reports the volumes a previous container of this sidecar took and that
// are not offered again (no "<volume>.sock"): their gcsfuse died with that container and
// their mounts answer ENOTCONN. They count as failed (exit 1 at the usual end, reasons in
// the termination message); the sidecar stays up for the volumes that still serve or are
// still offered, instead of crash-looping or cutting them.
func (s *Sidecar) adoptPredecessor(tmp *os.File) {
	recs, err := readTaken(tmp)
	if err != nil {
		s.log.Warn("cannot read the taken records of a previous sidecar container", "err", err)
		return
	}
	if len(recs) == 0 {
		return
	}
	var offeredNow func(string) bool
	if hd, err := podpath.OpenDir(s.cfg.TmpDir, contract.HandoffDir); err == nil {
		defer hd.Close()
		offeredNow = func(v string) bool {
			ok, err := podpath.Exists(hd, v+contract.HandoffSocketSuffix)
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
		s.failed = append(s.failed, res.describe())
		s.log.Error("volume lost with the previous sidecar container: its mount fails with ENOTCONN; the other volumes keep serving and the sidecar exits 1 when told to end",
			"volume", v, "bucket", r.Bucket, "takenAt", r.TakenAt)
	}
}
