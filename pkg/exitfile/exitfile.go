// Package exitfile is how the node plugin tells a legacy (regular-container) sidecar that
// the pod's workload is done: a small JSON file in the pod's gcsfuse-tmp emptyDir, written
// atomically and without following symlinks. The sidecar already watches that directory
// with inotify for hand-off sockets, so the file wakes it within milliseconds: no polling.
package exitfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// maxSize bounds what a reader accepts.
const maxSize = 4096

// Reason says why the sidecar is asked to exit.
type Reason struct {
	// Rule is the lifecycle rule that fired (for logs and metrics).
	Rule string `json:"rule"`
	// Message is for humans.
	Message string `json:"message,omitempty"`
	// WorkloadFinishedAt is when the last workload container finished.
	WorkloadFinishedAt time.Time `json:"workloadFinishedAt,omitzero"`
	// WrittenAt is when the node plugin wrote the file.
	WrittenAt time.Time `json:"writtenAt"`
}

// OpenDir opens, without following symlinks, the gcsfuse-tmp emptyDir of the pod with
// podUID. An error wrapping os.ErrNotExist means the kubelet has not made it or has removed it.
func OpenDir(kubeletRoot, podUID string) (*os.File, error) {
	dir, err := podpath.OpenDir(kubeletRoot, "pods", podUID, "volumes", "kubernetes.io~empty-dir", contract.TmpVolumeName)
	if err != nil {
		return nil, fmt.Errorf("open pod %s %s emptyDir: %w", podUID, contract.TmpVolumeName, err)
	}
	return dir, nil
}

// Write puts the exit file into the emptyDir of the pod with podUID.
func Write(kubeletRoot, podUID string, r Reason) error {
	dir, err := OpenDir(kubeletRoot, podUID)
	if err != nil {
		return err
	}
	defer dir.Close()
	return WriteIn(dir, r)
}

// Present reports whether dir already holds an exit file. The file is only ever written
// whole (rename) and never removed while the pod lives, so a present file has reached, or
// will reach at its start, every sidecar of the pod: writing it again would change nothing.
func Present(dir *os.File) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), contract.ExitFile, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, &os.PathError{Op: "fstatat", Path: filepath.Join(dir.Name(), contract.ExitFile), Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG, nil
}

// WriteIn writes the exit file into an already opened emptyDir.
func WriteIn(dir *os.File, r Reason) error {
	if r.WrittenAt.IsZero() {
		r.WrittenAt = time.Now()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode exit file: %w", err)
	}
	return podpath.WriteFileAtomic(dir, contract.ExitFile, b, 0o644)
}

// Read parses the exit file in dir. A file that is not valid JSON still means "exit": the
// reason is then reported as unreadable.
func Read(dir *os.File) (Reason, error) {
	b, err := podpath.ReadFile(dir, contract.ExitFile, maxSize)
	if err != nil {
		return Reason{}, err
	}
	var r Reason
	if err := json.Unmarshal(b, &r); err != nil {
		return Reason{Rule: "unreadable-exit-file"}, nil
	}
	return r, nil
}
