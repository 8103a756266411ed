package nodevolume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
)

// UnmountTarget unmounts target (lazily if still busy after busyWait) and removes the
// directory; neither there is a success.
func UnmountTarget(ctx context.Context, target string, busyWait time.Duration) error {
	if err := fusemount.Unmount(ctx, target, busyWait); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.Internal, "remove target %s: %v", target, err)
	}
	return nil
}

// ApplyReadAhead sets the mount's kernel read-ahead when the volume asks for one
// (read_ahead_kb; nil: nothing). It runs once gcsfuse has answered the kernel: at that
// answer the kernel lowers the read-ahead to what gcsfuse allows (1 MiB), so a value set at
// mount time would not hold. A failure leaves the mount serving with the kernel's default,
// and says so in the log and an Event on pod.
func ApplyReadAhead(mountPoint string, kb *int, pod PodRef, volume string, events EventSink, log *slog.Logger) {
	if kb == nil {
		return
	}
	if err := fusemount.SetReadAhead(mountPoint, *kb); err != nil {
		log.Warn("cannot apply read_ahead_kb; the mount keeps the kernel's read-ahead", "err", err)
		PodEventTo(events, pod, true, contract.EventReadAheadFailed, fmt.Sprintf("volume %s: read_ahead_kb=%d not applied: %v", volume, *kb, err))
		return
	}
	log.Info("read-ahead set", "readAheadKB", *kb)
}

// machineTypeFlag is gcsfuse's flag; a volume's mountOptions may set it too.
const machineTypeFlag = "--machine-type="

// WithMachineType returns flags with --machine-type=mt added, unless mt is empty (gcsfuse
// looks it up itself) or the volume chose its own. flags is not modified.
func WithMachineType(flags []string, mt string) []string {
	if mt == "" || slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, machineTypeFlag) }) {
		return flags
	}
	return append(slices.Clip(flags), machineTypeFlag+mt)
}

// WithoutMachineType returns flags without --machine-type (a new slice): the node's
// machine type may be learnt between two publishes of one volume, which stay the same.
func WithoutMachineType(flags []string) []string {
	return slices.DeleteFunc(slices.Clone(flags), func(f string) bool { return strings.HasPrefix(f, machineTypeFlag) })
}
