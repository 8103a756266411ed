package podfiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// takenMaxSize bounds what is read back from a taken record (the directory is pod-writable).
const takenMaxSize = 4096

// Taken is the content of a volume's taken record: the sidecar container that writes it took
// the volume's descriptor. The emptyDir outlives the container, so when the kubelet restarts
// the sidecar (native restartPolicy Always, legacy under OnFailure/Always) the new container
// learns which mounts died with the old one: the node plugin will not offer them again, and
// without the record the new sidecar would neither serve nor report them.
type Taken struct {
	Bucket  string    `json:"bucket"`
	TakenAt time.Time `json:"takenAt"`
}

// volumeDir opens (creating it if missing, mode 0700) the sidecar's directory of volume
// under the pinned emptyDir tmp, without following symlinks at either level.
func volumeDir(tmp *os.File, volume string) (*os.File, error) {
	vols, err := podpath.MkdirOpen(tmp, sidecarVolumesDir, 0o700)
	if err != nil {
		return nil, err
	}
	defer vols.Close()
	return podpath.MkdirOpen(vols, volume, 0o700)
}

// WriteTaken records (or replaces the record) that this sidecar container took volume:
// atomically, mode 0600, without following a symlink, under the pinned emptyDir tmp.
func WriteTaken(tmp *os.File, volume string, r Taken) error {
	d, err := volumeDir(tmp, volume)
	if err != nil {
		return fmt.Errorf("taken record of %s: %w", volume, err)
	}
	defer d.Close()
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode taken record of %s: %w", volume, err)
	}
	return podpath.WriteFileAtomic(d, takenFile, b, 0o600)
}

// RemoveTaken removes volume's taken record (a missing one is not an error).
func RemoveTaken(tmp *os.File, volume string) error {
	d, err := volumeDir(tmp, volume)
	if err != nil {
		return fmt.Errorf("taken record of %s: %w", volume, err)
	}
	defer d.Close()
	return podpath.Remove(d, takenFile)
}

// ReadTaken returns the taken records under the pinned emptyDir tmp by volume name. Entries
// that are not volume directories, or whose record is missing, are skipped; an unreadable
// record still counts (with what could be read) since the volume was taken.
func ReadTaken(tmp *os.File) (map[string]Taken, error) {
	vols, err := podpath.MkdirOpen(tmp, sidecarVolumesDir, 0o700)
	if err != nil {
		return nil, err
	}
	defer vols.Close()
	entries, err := vols.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", sidecarVolumesDir, err)
	}
	out := map[string]Taken{}
	for _, e := range entries {
		if !e.IsDir() || !contract.ValidVolumeName(e.Name()) {
			continue
		}
		d, err := podpath.MkdirOpen(vols, e.Name(), 0o700)
		if err != nil {
			continue
		}
		b, err := podpath.ReadFile(d, takenFile, takenMaxSize)
		d.Close()
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		var r Taken
		if err == nil {
			_ = json.Unmarshal(b, &r) // a garbled record still says the volume was taken
		}
		out[e.Name()] = r
	}
	return out, nil
}
