// Package driverpod is the one answer to "which of a pod's volumes are the driver's?", for
// the webhook at admission, the pod watch and the metrics collection on the node. From the
// pod's spec alone a volume is the driver's inline (a CSI volume naming the driver), not the
// driver's, or a claim (persistentVolumeClaim, or a generic ephemeral volume's template)
// that is the driver's when it resolves to one of its PersistentVolumes or classes: the
// webhook resolves claims through the API (pkg/webhook/claims.go), the node takes those of a
// pod the webhook injected as the driver's (it injects only where some volume is).
package driverpod

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Kind is what a pod volume's spec says of it.
type Kind int

const (
	// NotOurs is any other volume.
	NotOurs Kind = iota
	// Inline is a CSI ephemeral volume of the driver.
	Inline
	// Claim is a persistentVolumeClaim volume or a generic ephemeral volume: the driver's
	// when its claim resolves to the driver.
	Claim
)

// Classify says what v is, for the driver installed as driverName.
func Classify(v *corev1.Volume, driverName string) Kind {
	switch {
	case v.CSI != nil:
		if v.CSI.Driver == driverName {
			return Inline
		}
	case v.PersistentVolumeClaim != nil, v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
		return Claim
	}
	return NotOurs
}

// Volumes returns the names of the pod's volumes that are the driver's, in the pod's order:
// every Inline one, and each Claim for which claimIsOurs says so (nil: no claim is).
func Volumes(pod *corev1.Pod, driverName string, claimIsOurs func(*corev1.Volume) bool) []string {
	var out []string
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		switch Classify(v, driverName) {
		case Inline:
			out = append(out, v.Name)
		case Claim:
			if claimIsOurs != nil && claimIsOurs(v) {
				out = append(out, v.Name)
			}
		}
	}
	return out
}

// OnNode returns the pod's volumes that are the driver's as the node can tell without the
// API: the Inline ones and, in a pod that carries the driver's sidecar, its claims.
func OnNode(pod *corev1.Pod, driverName string) []string {
	injected := HasSidecar(pod)
	return Volumes(pod, driverName, func(*corev1.Volume) bool { return injected })
}

// Uses reports whether the pod is one of the driver's: it has an Inline volume, or the
// driver's sidecar (the webhook injected it for a volume, inline or claimed).
func Uses(pod *corev1.Pod, driverName string) bool {
	if HasSidecar(pod) {
		return true
	}
	for i := range pod.Spec.Volumes {
		if Classify(&pod.Spec.Volumes[i], driverName) == Inline {
			return true
		}
	}
	return false
}

// HasSidecar reports whether the pod carries the driver's sidecar, native or legacy.
func HasSidecar(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == contract.SidecarContainerName {
				return true
			}
		}
	}
	return false
}
