// Package exitfile is how the node plugin tells a legacy (regular-container) sidecar that
// the pod's workload is done: a small JSON file in the pod's gcsfuse-tmp emptyDir, written
// atomically and without following symlinks. The sidecar already watches that directory
// with inotify for hand-off sockets, so the file wakes it within milliseconds: no polling.
package exitfile

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

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

// Write puts the exit file into the emptyDir of the pod with podUID.
func Write(kubeletRoot, podUID string, r Reason) error {
	dir, err := podpath.OpenDir(kubeletRoot, "pods", podUID, "volumes", "kubernetes.io~empty-dir", contract.TmpVolumeName)
	if err != nil {
		return fmt.Errorf("open pod %s %s emptyDir: %w", podUID, contract.TmpVolumeName, err)
	}
	defer dir.Close()
	return WriteIn(dir, r)
}

// WriteIn writes the exit file into an already opened emptyDir.
func WriteIn(dir *os.File, r Reason) error {
	if r.WrittenAt.IsZero() {
		r.WrittenAt = time.Now()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
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
