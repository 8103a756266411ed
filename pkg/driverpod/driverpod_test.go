package driverpod

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestUses(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"inline CSI volume", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}}}}, true},
		{"other CSI driver", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			CSI: &corev1.CSIVolumeSource{Driver: "other.csi"}}}}}, false},
		{"legacy sidecar", corev1.PodSpec{Containers: []corev1.Container{{Name: contract.SidecarContainerName}}}, true},
		{"native sidecar", corev1.PodSpec{InitContainers: []corev1.Container{{Name: contract.SidecarContainerName, RestartPolicy: &always}}}, true},
		{"neither", corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}, false},
		// A claim or a generic ephemeral volume may be anyone's: without the sidecar (the
		// webhook injects it for one of ours) the pod is not the driver's.
		{"claim, no sidecar", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}, false},
		{"ephemeral volume, no sidecar", corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{}}}}}, false},
	}
	for _, tc := range tests {
		if got := Uses(&corev1.Pod{Spec: tc.spec}, contract.DriverName); got != tc.want {
			t.Errorf("%s: Uses() = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Installed under the GKE driver's name, its inline volumes are ours and ours are not.
	for driver, want := range map[string]bool{contract.IncumbentDriverName: true, contract.DriverName: false} {
		spec := corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			CSI: &corev1.CSIVolumeSource{Driver: driver}}}}}
		if got := Uses(&corev1.Pod{Spec: spec}, contract.IncumbentDriverName); got != want {
			t.Errorf("installed as %s, inline volume of %s: Uses() = %v, want %v", contract.IncumbentDriverName, driver, got, want)
		}
	}
}

// The driver's volumes of a pod: inline ones of its name, and claims (bound or ephemeral)
// when the resolver says so; on the node, the claims of a pod the webhook injected.
func TestVolumes(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "inline", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}},
		{Name: "other-csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "other.csi"}}},
		{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
		{Name: "ephemeral", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}}},
		{Name: "empty", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}}
	if got := Volumes(pod, contract.DriverName, nil); !slices.Equal(got, []string{"inline"}) {
		t.Errorf("no claim resolver: %v", got)
	}
	onlyC := func(v *corev1.Volume) bool { return v.Name == "claim" }
	if got := Volumes(pod, contract.DriverName, onlyC); !slices.Equal(got, []string{"inline", "claim"}) {
		t.Errorf("claim c resolved as ours: %v", got)
	}
	if got := OnNode(pod, contract.DriverName); !slices.Equal(got, []string{"inline"}) {
		t.Errorf("on the node, not injected: %v; a claim there may be another driver's", got)
	}
	pod.Spec.InitContainers = []corev1.Container{{Name: contract.SidecarContainerName, RestartPolicy: &always}}
	if got := OnNode(pod, contract.DriverName); !slices.Equal(got, []string{"inline", "claim", "ephemeral"}) {
		t.Errorf("on the node, injected: %v", got)
	}
}
