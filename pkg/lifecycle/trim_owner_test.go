package lifecycle_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/ownership"
)

// The trimmed pod the node keeps still tells who owns a mount's files (pkg/ownership reads
// the containers' runAsUser through it).
func TestTrimKeepsTheMountsOwner(t *testing.T) {
	uid := int64(1000)
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "gcs", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}}},
		Containers: []corev1.Container{{Name: contract.SidecarContainerName},
			{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "gcs", MountPath: "/data"}}, SecurityContext: &corev1.SecurityContext{RunAsUser: &uid}}},
	}}
	wu, ww, wok := ownership.SoleUser(pod, "gcs", contract.SidecarContainerName)
	gu, gw, gok := ownership.SoleUser(lifecycle.Trim(pod, contract.DriverName), "gcs", contract.SidecarContainerName)
	if !wok || gu != wu || gok != wok || !slices.Equal(gw, ww) {
		t.Fatalf("SoleUser of the trimmed pod = %d %v %v, of the pod %d %v %v", gu, gw, gok, wu, ww, wok)
	}
}
