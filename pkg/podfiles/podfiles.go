// Package podfiles is the one owner of the pod directory's layout, on the host and inside
// the pod. On the host it knows the kubelet's paths: the pod's gcsfuse-tmp emptyDir as the
// node plugin reaches it (<kubelet>/pods/<uid>/volumes/kubernetes.io~empty-dir/gcsfuse-tmp)
// and its CSI target paths. Inside that emptyDir (layout.go) it knows every file the node
// plugin and the sidecar share, and gives each a typed read or write on a pinned descriptor
// of the directory (openat and O_NOFOLLOW through pkg/podpath, never a path a container of
// the pod could redirect with a symlink):
//   - the exit file (the workload is done), the terminating file (the pod is being deleted,
//     with the grace period the kubelet applies) and the init-done file (a native pod's
//     regular init containers all succeeded), which the node plugin writes as JSON,
//     atomically; the sidecar watches the directory, so a file wakes it within
//     milliseconds: no polling;
//   - the hand-off directory and its per-volume socket names;
//   - the sidecar's taken record of each volume it took;
//   - the node plugin's per-volume credentials directory (credentials, token, CA bundle);
//   - the sidecar's metrics socket.
//
// Paths (At) gives the same files as paths, for what must go by path: the sidecar's view of
// its mount (what it hands gcsfuse: the key file, the combined CA bundle and the temp dir,
// which the sidecar, unprivileged inside the pod, makes by path), and tests and tools on the
// host. The node plugin, the sidecar and the tests import this package; no other package
// joins these path elements.
package podfiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// The kubelet's layout of a pod's volumes under its root directory.
const (
	podsDir     = "pods"
	volumesDir  = "volumes"
	emptyDirDir = "kubernetes.io~empty-dir"
	csiDir      = "kubernetes.io~csi"
	mountDir    = "mount"
)

// PodDir is the host path of the pod's directory under the kubelet's root.
func PodDir(kubeletRoot, podUID string) string {
	return filepath.Join(kubeletRoot, podsDir, podUID)
}

// CSIVolumesDir is the host directory of the pod's CSI volumes (the parent of every target).
func CSIVolumesDir(kubeletRoot, podUID string) string {
	return filepath.Join(kubeletRoot, podsDir, podUID, volumesDir, csiDir)
}

// CSITargetPath is where the kubelet publishes the pod's CSI volume named volume.
func CSITargetPath(kubeletRoot, podUID, volume string) string {
	return filepath.Join(CSIVolumesDir(kubeletRoot, podUID), volume, mountDir)
}

// Target is what a kubelet CSI target path says about the pod and its volume.
type Target struct {
	PodUID     string
	VolumeName string
}

// ParseTarget checks that target is "<kubeletRoot>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount"
// and returns its parts. The kubelet always publishes there; anything else is a caller error.
func ParseTarget(kubeletRoot, target string) (Target, error) {
	rel, err := filepath.Rel(filepath.Clean(kubeletRoot), filepath.Clean(target))
	if err != nil || filepath.Clean(target) != target {
		return Target{}, fmt.Errorf("target path %q is not a clean absolute path under %s", target, kubeletRoot)
	}
	parts := strings.Split(rel, string(filepath.Separator))
	if len(parts) != 6 || parts[0] != podsDir || parts[2] != volumesDir || parts[3] != csiDir || parts[5] != mountDir {
		return Target{}, fmt.Errorf("target path %q is not a kubelet CSI volume path (%s/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount)", target, kubeletRoot)
	}
	if !podpath.ValidElement(parts[1]) || !podpath.ValidElement(parts[4]) {
		return Target{}, fmt.Errorf("target path %q has an invalid pod UID or volume name", target)
	}
	return Target{PodUID: parts[1], VolumeName: parts[4]}, nil
}

// emptyDirElems are the path elements, under the kubelet's root, of the pod's emptyDir
// volume named volume.
func emptyDirElems(podUID, volume string) []string {
	return []string{podsDir, podUID, volumesDir, emptyDirDir, volume}
}

// EmptyDirPath is the host path of the pod's emptyDir volume named volume (for tests and
// tools that look at it; the node plugin itself opens it with OpenTmpDir).
func EmptyDirPath(kubeletRoot, podUID, volume string) string {
	return filepath.Join(append([]string{kubeletRoot}, emptyDirElems(podUID, volume)...)...)
}

// TmpDirPath is the host path of the pod's gcsfuse-tmp emptyDir.
func TmpDirPath(kubeletRoot, podUID string) string {
	return EmptyDirPath(kubeletRoot, podUID, contract.TmpVolumeName)
}

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

// OpenTmpDir opens, without following symlinks, the gcsfuse-tmp emptyDir of the pod with
// podUID. An error wrapping os.ErrNotExist means the kubelet has not made it or has removed it.
func OpenTmpDir(kubeletRoot, podUID string) (*os.File, error) {
	dir, err := podpath.OpenDir(kubeletRoot, emptyDirElems(podUID, contract.TmpVolumeName)...)
	if err != nil {
		return nil, fmt.Errorf("open pod %s %s emptyDir: %w", podUID, contract.TmpVolumeName, err)
	}
	return dir, nil
}

// Write puts the exit file into the emptyDir of the pod with podUID.
func Write(kubeletRoot, podUID string, r Reason) error {
	dir, err := OpenTmpDir(kubeletRoot, podUID)
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
	err := unix.Fstatat(int(dir.Fd()), ExitFile, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case err != nil:
		return false, &os.PathError{Op: "fstatat", Path: filepath.Join(dir.Name(), ExitFile), Err: err}
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
	return podpath.WriteFileAtomic(dir, ExitFile, b, 0o644)
}

// Read parses the exit file in dir. A file that is not valid JSON still means "exit": the
// reason is then reported as unreadable.
func Read(dir *os.File) (Reason, error) {
	b, err := podpath.ReadFile(dir, ExitFile, maxSize)
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
	return podpath.WriteFileAtomic(dir, TerminatingFile, b, 0o644)
}

// ReadTerminating parses the terminating file in dir. Unlike the exit file, a file that does
// not parse is an error: the caller then keeps the pod spec's grace rather than guess one.
// A missing file is an error that matches os.ErrNotExist.
func ReadTerminating(dir *os.File) (Terminating, error) {
	b, err := podpath.ReadFile(dir, TerminatingFile, maxSize)
	if err != nil {
		return Terminating{}, err
	}
	var raw struct {
		GraceSeconds      *int64    `json:"graceSeconds"`
		DeletionTimestamp time.Time `json:"deletionTimestamp"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Terminating{}, fmt.Errorf("parse %s: %w", TerminatingFile, err)
	}
	if raw.GraceSeconds == nil {
		return Terminating{}, errors.New("parse " + TerminatingFile + ": no graceSeconds")
	}
	t := Terminating{GraceSeconds: *raw.GraceSeconds, DeletionTimestamp: raw.DeletionTimestamp}
	if err := t.validate(); err != nil {
		return Terminating{}, fmt.Errorf("parse %s: %w", TerminatingFile, err)
	}
	return t, nil
}

// InitDone is the content of the init-done file.
type InitDone struct {
	// WrittenAt is when the node plugin wrote the file.
	WrittenAt time.Time `json:"writtenAt"`
}

// InitDonePresent reports whether the pinned emptyDir dir holds the init-done file
// (without following a symlink: a symlink counts as present).
func InitDonePresent(dir *os.File) (bool, error) { return podpath.Exists(dir, InitDoneFile) }

// WriteInitDoneIn writes the init-done file into an opened gcsfuse-tmp emptyDir.
func WriteInitDoneIn(dir *os.File, d InitDone) error {
	if d.WrittenAt.IsZero() {
		d.WrittenAt = time.Now()
	}
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode init-done file: %w", err)
	}
	return podpath.WriteFileAtomic(dir, InitDoneFile, b, 0o644)
}
