package main

import (
	"context"
	"log/slog"
	"time"
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
func superviseWatch(ctx context.Context, run func(context.Context) error, backoff restartBackoff, log *slog.Logger) {
	wait := backoff.first
	for {
		err := run(ctx)
		if ctx.Err() != nil {
			if err != nil {
				log.Warn("pod watch did not stop cleanly", "err", err)
			}
			return
		}
		log.Error("pod watch ended; CSI calls are still served; starting it again", "err", err, "in", wait.String())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, backoff.max)
	}
}
