package podfiles

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// HandoffSocketName is the file name, in HandoffDir, of volume's hand-off socket.
func HandoffSocketName(volume string) string { return volume + handoffSocketSuffix }

// PendingHandoffSocketName is the hidden name a node plugin binds volume's socket under
// before it has its owner and is renamed to HandoffSocketName. HandoffSocketVolume refuses
// it (it starts with "."); the name is fixed per volume, so a node plugin killed between
// bind and rename leaves at most one such file per volume, which the next offer removes.
func PendingHandoffSocketName(volume string) string {
	return "." + HandoffSocketName(volume) + ".pending"
}

// ErrNotHandoffSocket says that a name in HandoffDir is not a hand-off socket's: it does not
// end in the socket suffix, or it is hidden (a socket being bound, PendingHandoffSocketName).
// Such names are not worth a word.
var ErrNotHandoffSocket = errors.New("not a hand-off socket name")

// HandoffSocketVolume returns the volume whose hand-off socket is named name. The error is
// ErrNotHandoffSocket for a name that is not a socket's, or another one for a socket name
// whose volume is not a volume name (contract.ValidVolumeName): nothing a node plugin makes.
func HandoffSocketVolume(name string) (string, error) {
	if !strings.HasSuffix(name, handoffSocketSuffix) || strings.HasPrefix(name, ".") {
		return "", ErrNotHandoffSocket
	}
	volume := strings.TrimSuffix(name, handoffSocketSuffix)
	if !contract.ValidVolumeName(volume) {
		return "", fmt.Errorf("hand-off socket %q: %q is not a volume name", name, volume)
	}
	return volume, nil
}

// CreateHandoffDir opens the hand-off directory inside the pinned emptyDir tmp, creating it
// (mode 0755) if missing, without following a symlink: the node plugin offers there.
func CreateHandoffDir(tmp *os.File) (*os.File, error) {
	return podpath.MkdirOpen(tmp, HandoffDir, 0o755)
}

// OpenHandoffDir opens the hand-off directory of the emptyDir mounted at tmpDir, without
// following a symlink below tmpDir. An error wrapping os.ErrNotExist means no volume was
// offered yet (the sidecar then waits for the directory to appear).
func OpenHandoffDir(tmpDir string) (*os.File, error) {
	return podpath.OpenDir(tmpDir, HandoffDir)
}

// HandoffSocketPresent reports whether the pinned hand-off directory holds volume's socket
// (without following a symlink: a symlink counts as present).
func HandoffSocketPresent(handoffDir *os.File, volume string) (bool, error) {
	return podpath.Exists(handoffDir, HandoffSocketName(volume))
}
