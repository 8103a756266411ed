package sidecar

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// minKubeletGrace is the shortest grace the kubelet gives a container it stops, whatever
// the pod or the deletion asks for: a drain lasts at least that long.
const minKubeletGrace = 2 * time.Second

// Grace sources, for logs.
const (
	graceFromFile = "terminating file"
	graceFromSpec = "pod spec"
)

// shouldDrain decides what a SIGTERM means, and says why for the log.
//
// Draining keeps every mount serving until the node plugin's exit file says the containers
// that use them have exited. It is needed whenever the SIGTERM may reach those containers
// at the same moment: always for a legacy sidecar (a regular container, stopped with the
// app), and for a native sidecar while regular init containers that mount a volume may
// still run (the kubelet stops them with the sidecars when the pod is deleted during its
// init phase). Otherwise the kubelet signals a native sidecar only after every container
// that could use the mounts has exited: stopping at once is safe and costs nothing.
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
	return drainDecision(s.cfg, serving, initDone)
}

// drainDecision is shouldDrain's rule, on plain inputs.
func drainDecision(cfg Config, serving int, initDone bool) (bool, string) {
	switch {
	case !cfg.Drain:
		return false, "draining disabled (--drain=false)"
	case serving == 0:
		return false, "no volume is serving: nothing to drain"
	case cfg.Mode != contract.ModeNative:
		return true, "legacy sidecar: the app got the same SIGTERM and may still write"
	case len(cfg.InitContainers) > 0 && !initDone:
		return true, "native sidecar during the init phase: init containers " + strings.Join(cfg.InitContainers, ",") + " may still use the mounts"
	case len(cfg.InitContainers) > 0:
		return false, "native sidecar: init phase over and the kubelet signals sidecars after the regular containers exited"
	}
	return false, "native sidecar: the kubelet signals sidecars after the regular containers exited"
}

// drainDeadline returns when a drain started by a SIGTERM at sigterm ends without the exit
// file, the grace it used and where that grace came from. It is exactly when the kubelet
// kills the app, with no margin: a mount must never stop serving while the app may still
// run. The grace is the deletion's (from the node plugin's terminating file, term) when
// known, else the pod spec's, and never under the kubelet's minimum.
func drainDeadline(sigterm time.Time, spec time.Duration, term *podfiles.Terminating) (time.Time, time.Duration, string) {
	grace, source := spec, graceFromSpec
	if term != nil {
		grace, source = term.Grace(), graceFromFile
	}
	grace = max(grace, minKubeletGrace)
	return sigterm.Add(grace), grace, source
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
