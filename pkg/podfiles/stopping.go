package podfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// maxStoppingBytes bounds what ReadMounterStopping reads (one RFC 3339 time).
const maxStoppingBytes = 128

// WriteMounterStopping records, in the mounter's directory dir, that the mounter is stopping
// and serves its mounts until deadline (MounterStoppingFile).
func WriteMounterStopping(dir *os.File, deadline time.Time) error {
	return podpath.WriteFileAtomic(dir, MounterStoppingFile, []byte(deadline.UTC().Format(time.RFC3339Nano)+"\n"), 0o644)
}

// RemoveMounterStopping removes the record: a mounter starting is not stopping, whatever
// its predecessor left.
func RemoveMounterStopping(dir *os.File) error {
	if err := podpath.Remove(dir, MounterStoppingFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ReadMounterStopping reports whether the mounter of dir is stopping, and until when it
// serves (zero when the record does not say).
func ReadMounterStopping(dir *os.File) (stopping bool, deadline time.Time, err error) {
	data, err := podpath.ReadFile(dir, MounterStoppingFile, maxStoppingBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return false, time.Time{}, nil
	}
	if err != nil {
		return false, time.Time{}, fmt.Errorf("read %s: %w", MounterStoppingFile, err)
	}
	d, perr := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data)))
	if perr != nil {
		return true, time.Time{}, nil
	}
	return true, d, nil
}
