package nodeplugin

import (
	"context"
	"log/slog"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/backoff"
)

// How a pod watch that ended early is started again.
const (
	watchRestartFirst = time.Second
	watchRestartMax   = time.Minute
)

// restartBackoff is the wait before restarting an ended pod watch: first, doubling up to max.
type restartBackoff struct{ first, max time.Duration }

var defaultWatchRestart = restartBackoff{first: watchRestartFirst, max: watchRestartMax}

// superviseWatch runs the pod watch until ctx ends. The node plugin's first duty is to serve
// CSI calls, which need no API server, so nothing the pod watch does may end the node plugin:
// the watch rides out API outages itself (it waits and retries), and should it still end
// early (a bug), the error is logged and a new watch started after a capped backoff. run must
// start a new watcher on each call (a podwatch.Watcher runs once).
func superviseWatch(ctx context.Context, run func(context.Context) error, restart restartBackoff, log *slog.Logger) {
	pace := backoff.Doubling(restart.first, restart.max)
	for {
		err := run(ctx)
		if ctx.Err() != nil {
			if err != nil {
				log.Warn("pod watch did not stop cleanly", "err", err)
			}
			return
		}
		wait := pace.Step()
		log.Error("pod watch ended; CSI calls are still served; starting it again", "err", err, "in", wait.String())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
