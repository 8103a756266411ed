package exitfile

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Terminating is the content of contract.TerminatingFile: the grace period the kubelet
// applies to the pod being deleted, so that a draining sidecar serves until then and no
// less (kubectl delete --grace-period=N overrides the spec's terminationGracePeriodSeconds).
type Terminating struct {
	// GraceSeconds is metadata.deletionGracePeriodSeconds, or the spec's grace if unset.
	GraceSeconds int64 `json:"graceSeconds"`
	// DeletionTimestamp is the pod's metadata.deletionTimestamp.
	DeletionTimestamp time.Time `json:"deletionTimestamp,omitzero"`
}

// WriteTerminating writes contract.TerminatingFile into an already opened emptyDir.
func WriteTerminating(dir *os.File, t Terminating) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode %s: %w", contract.TerminatingFile, err)
	}
	return podpath.WriteFileAtomic(dir, contract.TerminatingFile, b, 0o644)
}
