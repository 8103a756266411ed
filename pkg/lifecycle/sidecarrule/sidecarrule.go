// Package sidecarrule holds the lifecycle rules the sidecar applies by itself, on its own
// configuration and the node plugin's files rather than on a pod object: what a SIGTERM
// means (DrainDecision), and when a drain, or the legacy sidecar's preStop wait, ends at
// the latest (StopGrace, DrainDeadline). They belong with pkg/lifecycle's rules and live in
// a package of their own because the sidecar links no pod type: importing pkg/lifecycle
// would add k8s.io/api/core/v1 to its binary (measured: +5.9 MB, +1.9 MB RSS at start).
// Like pkg/lifecycle, it does no I/O and reads no clock.
package sidecarrule

import (
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// DrainInputs is what DrainDecision decides on: the sidecar's configuration and state when it gets
// SIGTERM.
type DrainInputs struct {
	// Enabled is the sidecar's --drain flag; off (the data-loss benchmark only), SIGTERM
	// stops at once in every mode.
	Enabled bool
	// Mode is contract.ModeNative or contract.ModeLegacy.
	Mode string
	// Serving is the number of volumes the sidecar serves.
	Serving int
	// InitContainers are the regular init containers that start after a native sidecar
	// and mount a gcsfuse volume (contract.EnvInitContainers).
	InitContainers []string
	// InitDone: the node plugin's init-done file is present (every regular init container
	// exited 0). Only read for a native sidecar with InitContainers.
	InitDone bool
}

// DrainDecision decides what a SIGTERM means, and says why for the log.
//
// Draining keeps every mount serving until the node plugin's exit file says the containers
// that use them have exited. It is needed whenever the SIGTERM may reach those containers
// at the same moment: always for a legacy sidecar (a regular container, stopped with the
// app), and for a native sidecar while regular init containers that mount a volume may
// still run (the kubelet stops them with the sidecars when the pod is deleted during its
// init phase). Otherwise the kubelet signals a native sidecar only after every container
// that could use the mounts has exited: stopping at once is safe and costs nothing.
func DrainDecision(in DrainInputs) (drain bool, why string) {
	switch {
	case !in.Enabled:
		return false, "draining disabled (--drain=false)"
	case in.Serving == 0:
		return false, "no volume is serving: nothing to drain"
	case in.Mode == contract.ModeShared:
		return true, "shared mounter: pods of the node may still use its mounts; it serves until the node plugin has unmounted them all"
	case in.Mode != contract.ModeNative:
		return true, "legacy sidecar: the app got the same SIGTERM and may still write"
	case len(in.InitContainers) > 0 && !in.InitDone:
		return true, "native sidecar during the init phase: init containers " + strings.Join(in.InitContainers, ",") + " may still use the mounts"
	case len(in.InitContainers) > 0:
		return false, "native sidecar: init phase over and the kubelet signals sidecars after the regular containers exited"
	}
	return false, "native sidecar: the kubelet signals sidecars after the regular containers exited"
}

// MinKubeletGrace is the shortest grace the kubelet gives a container it stops, whatever
// the pod or the deletion asks for: a drain lasts at least that long.
const MinKubeletGrace = 2 * time.Second

// GraceSource says where StopGrace took the grace from, for logs.
type GraceSource string

// Grace sources.
const (
	// GraceFromFile: the deletion's grace, from the node plugin's terminating file
	// (lifecycle.AppliedGraceSeconds).
	GraceFromFile GraceSource = "terminating file"
	// GraceFromSpec: the pod spec's, which the webhook gave the sidecar at admission.
	GraceFromSpec GraceSource = "pod spec"
)

// StopGrace is the grace the kubelet gives the stopping sidecar: the deletion's when the node
// plugin's terminating file gave it (deletion not nil), else the pod spec's (spec), and
// never under MinKubeletGrace. It bounds a drain (DrainDeadline) and the legacy sidecar's
// preStop wait for the exit file.
func StopGrace(spec time.Duration, deletion *time.Duration) (time.Duration, GraceSource) {
	grace, source := spec, GraceFromSpec
	if deletion != nil {
		grace, source = *deletion, GraceFromFile
	}
	return max(grace, MinKubeletGrace), source
}

// DrainDeadline returns when a drain started by a SIGTERM at sigterm ends without the exit
// file, the grace it used and where that grace came from. It is exactly when the kubelet
// kills the app, with no margin: a mount must never stop serving while the app may still
// run.
func DrainDeadline(sigterm time.Time, spec time.Duration, deletion *time.Duration) (time.Time, time.Duration, GraceSource) {
	grace, source := StopGrace(spec, deletion)
	return sigterm.Add(grace), grace, source
}
