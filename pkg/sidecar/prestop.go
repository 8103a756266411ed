package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle/sidecarrule"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// preStopPoll is how often the preStop hook looks for the exit file: a hook runs once per
// pod deletion, so a stat every 50 ms costs nothing and needs no inotify instance (those
// are shared by every sidecar on the node).
const preStopPoll = 50 * time.Millisecond

// WaitExit is the legacy sidecar's preStop hook (contract.PreStopWaitFlag). The kubelet
// runs every container's preStop hook at once when it stops a pod and sends SIGTERM to a
// container only after its own hook returns, with at least two more seconds of grace after
// a hook. An app whose preStop takes the grace (a drain) can therefore still write for two
// seconds after the grace: a sidecar without a hook would already be gone. Waiting here
// for the exit file (the node plugin writes it once every container that mounts a volume
// has exited) keeps gcsfuse serving as long as the app may run; the wait is bounded by the
// deletion's grace (the terminating file) or else the pod's, which is also the kubelet's
// bound on a hook. It returns nil when the exit file came, an error naming what it waited
// for otherwise; the kubelet then goes on with SIGTERM, which starts the drain.
func WaitExit(ctx context.Context, tmpDir string, specGrace time.Duration, log *slog.Logger) error {
	start := time.Now()
	dir, err := podpath.OpenDir(tmpDir)
	if err != nil {
		return fmt.Errorf("preStop: open %s: %w", tmpDir, err)
	}
	defer dir.Close()
	var term *podfiles.Terminating
	if t, err := podfiles.ReadTerminating(dir); err == nil {
		term = &t
	} else if !errors.Is(err, os.ErrNotExist) {
		log.Warn("preStop: terminating file unreadable; using the pod spec's grace", "err", err)
	}
	grace, source := sidecarrule.StopGrace(specGrace, deletionGrace(term))
	log.Info("preStop: serving until the containers that use the mounts have exited", "grace", grace, "graceFrom", string(source))
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(preStopPoll)
	defer tick.Stop()
	for {
		ok, err := podfiles.Present(dir)
		switch {
		case err != nil:
			log.Warn("preStop: cannot check the exit file", "err", err)
		case ok:
			log.Info("preStop: exit file present; the sidecar may stop", "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("preStop: %w after %s without the exit file", ctx.Err(), time.Since(start).Round(time.Millisecond))
		case <-deadline.C:
			return fmt.Errorf("preStop: no exit file within the grace period (%s, from the %s); the kubelet stops the sidecar now", grace, source)
		case <-tick.C:
		}
	}
}
