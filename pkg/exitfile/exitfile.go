// Package exitfile holds the small files through which the node plugin tells a sidecar
// about its pod: the exit file (the workload is done) and the terminating file (the pod is
// being deleted, with the grace period the kubelet applies). Both are JSON in the pod's
// gcsfuse-tmp emptyDir, written atomically and without following symlinks. The sidecar
// already watches that directory with inotify for hand-off sockets, so a file wakes it
// within milliseconds: no polling.
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

// maxGraceSeconds bounds a terminating file's grace so that it always fits a time.Duration;
// anything larger is refused as garbage (the API caps nothing, but no kubelet waits decades).
const maxGraceSeconds = 100 * 365 * 24 * 3600

// Terminating is the content of the terminating file: the node plugin writes it when it
// sees the pod being deleted, possibly before or after the sidecar's SIGTERM.
type Terminating struct {
	// GraceSeconds is the grace the kubelet applies to this deletion
	// (metadata.deletionGracePeriodSeconds, which kubectl delete --grace-period sets and
	// which can be shorter or longer than the pod spec's terminationGracePeriodSeconds).
	GraceSeconds int64 `json:"graceSeconds"`
	// DeletionTimestamp is the pod's metadata.deletionTimestamp, for logs.
	DeletionTimestamp time.Time `json:"deletionTimestamp,omitzero"`
}

// Grace is GraceSeconds as a duration.
func (t Terminating) Grace() time.Duration { return time.Duration(t.GraceSeconds) * time.Second }

func (t Terminating) validate() error {
	if t.GraceSeconds < 0 || t.GraceSeconds > maxGraceSeconds {
		return fmt.Errorf("graceSeconds %d outside 0..%d", t.GraceSeconds, maxGraceSeconds)
	}
	return nil
}

// WriteTerminating writes the terminating file into an already opened emptyDir, atomically
// and without following a symlink (like WriteIn).
func WriteTerminating(dir *os.File, t Terminating) error {
	if err := t.validate(); err != nil {
		return fmt.Errorf("terminating file: %w", err)
	}
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode terminating file: %w", err)
	}
	return podpath.WriteFileAtomic(dir, contract.TerminatingFile, b, 0o644)
}

// ReadTerminating parses the terminating file in dir. Unlike the exit file, a file that does
// not parse is an error: the caller then keeps the pod spec's grace rather than guess one.
// A missing file is an error that matches os.ErrNotExist.
func ReadTerminating(dir *os.File) (Terminating, error) {
	b, err := podpath.ReadFile(dir, contract.TerminatingFile, maxSize)
	if err != nil {
		return Terminating{}, err
	}
	var raw struct {
		GraceSeconds      *int64    `json:"graceSeconds"`
		DeletionTimestamp time.Time `json:"deletionTimestamp"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Terminating{}, fmt.Errorf("parse %s: %w", contract.TerminatingFile, err)
	}
	if raw.GraceSeconds == nil {
		return Terminating{}, errors.New("parse " + contract.TerminatingFile + ": no graceSeconds")
	}
	t := Terminating{GraceSeconds: *raw.GraceSeconds, DeletionTimestamp: raw.DeletionTimestamp}
	if err := t.validate(); err != nil {
		return Terminating{}, fmt.Errorf("parse %s: %w", contract.TerminatingFile, err)
	}
	return t, nil
}
