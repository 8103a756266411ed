package webhook

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// checkInlineVolumes refuses, at admission, a pod whose inline volume of the driver
// NodePublishVolume would refuse for what the pod itself says: its fsType, an unknown
// attribute, a bucket name or a mount option outside the allowlist (mountopts, the very
// checks the node plugin runs). Refused at mount instead, such a pod would sit in
// ContainerCreating with FailedMount Events forever, a Job that never ends; refused here, kubectl
// apply (or the Job's FailedCreate Event) says what to fix at once. The denial reads as the
// node plugin's InvalidArgument does: "volume NAME: reason". Identity attributes stay with
// the node plugin, whose flags they depend on, and a claim's PersistentVolume may be bound
// or replaced after admission: both are checked at mount only.
func checkInlineVolumes(driver string, volumes []corev1.Volume) error {
	for _, v := range volumes {
		if v.CSI == nil || v.CSI.Driver != driver {
			continue
		}
		fsType := ""
		if v.CSI.FSType != nil {
			fsType = *v.CSI.FSType
		}
		if err := mountopts.CheckAccessType(false, fsType); err != nil {
			return badRequest("volume %s: %v", v.Name, err)
		}
		if _, err := mountopts.FromAttributes(v.CSI.VolumeAttributes, nil, ""); err != nil {
			return badRequest("volume %s: %v", v.Name, err)
		}
	}
	return nil
}
