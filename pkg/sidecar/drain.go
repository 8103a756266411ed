package sidecar

import (
	"errors"
	"os"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle/sidecarrule"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// shouldDrain decides what a SIGTERM means (sidecarrule.DrainDecision), and says why for
// the log. It reads what the rule needs: the number of serving volumes and, for a native
// sidecar with init containers that mount a volume, the node plugin's init-done file.
func (s *Sidecar) shouldDrain(tmp *os.File) (bool, string) {
	s.mu.Lock()
	serving := len(s.volumes)
	s.mu.Unlock()
	initDone := false
	if s.cfg.Mode == contract.ModeNative && len(s.cfg.InitContainers) > 0 {
		ok, err := podfiles.InitDonePresent(tmp)
		if err != nil {
			s.log.Warn("cannot check the init-done file; assuming init containers may still run", "err", err)
		}
		initDone = ok
	}
	return sidecarrule.DrainDecision(sidecarrule.DrainInputs{Enabled: s.cfg.Drain, Mode: s.cfg.Mode, Serving: serving,
		InitContainers: s.cfg.InitContainers, InitDone: initDone})
}

// deletionGrace is the deletion's grace from the node plugin's terminating file, as
// sidecarrule.StopGrace takes it: nil without one.
func deletionGrace(term *podfiles.Terminating) *time.Duration {
	if term == nil {
		return nil
	}
	g := term.Grace()
	return &g
}

// readTerminating reads the node plugin's terminating file; a missing one is an ordinary
// error, a garbled one is logged (the spec's grace then applies).
func (s *Sidecar) readTerminating(tmp *os.File) (podfiles.Terminating, error) {
	t, err := podfiles.ReadTerminating(tmp)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("terminating file unreadable; using the pod spec's grace", "err", err)
	}
	return t, err
}

// startDrain marks the sidecar draining and has every serving volume tell the node plugin,
// which then follows the pod's containers in the runtime and writes the exit file once they
// have exited, whatever stopped the pod (deletion, eviction, activeDeadlineSeconds).
func (s *Sidecar) startDrain() {
	s.mu.Lock()
	s.draining = true
	vols := make([]*volume, 0, len(s.volumes))
	for _, v := range s.volumes {
		vols = append(vols, v)
	}
	s.mu.Unlock()
	for _, v := range vols {
		v.notifyTerminating()
	}
}
