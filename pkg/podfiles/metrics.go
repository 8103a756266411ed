package podfiles

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// ListenMetrics listens on the sidecar's metrics socket inside the pinned emptyDir tmp, after
// removing a predecessor's (a restarted sidecar container's). The socket is bound through the
// directory's descriptor, so no symlink on the way is followed.
func ListenMetrics(tmp *os.File) (net.Listener, error) {
	if err := podpath.Remove(tmp, metricsSocket); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", podpath.ProcPath(tmp, metricsSocket))
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", metricsSocket, err)
	}
	return ln, nil
}

// RemoveMetricsSocket removes the metrics socket from the pinned emptyDir tmp (a missing one
// is not an error): the sidecar's last act, so that the node plugin stops dialing it.
func RemoveMetricsSocket(tmp *os.File) error { return podpath.Remove(tmp, metricsSocket) }

// DialMetrics connects to the sidecar's metrics socket inside the pinned emptyDir tmp with
// podpath.DialUnix (no symlink followed, the socket checked to be one); the connection ends
// at deadline. An error wrapping os.ErrNotExist means no sidecar serves metrics there.
func DialMetrics(tmp *os.File, deadline time.Time) (net.Conn, error) {
	return podpath.DialUnix(tmp, metricsSocket, deadline)
}
