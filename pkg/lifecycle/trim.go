package lifecycle

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/driverpod"
)

// Trim is the one view of a pod the node plugin keeps (its pod watch caches what Trim
// returns): only what the rules here (Decide and the rest, which TestTrimKeepsWhatTheRulesRead
// checks over the rule tables' pods), the driver's volumes (driverpod.OnNode), the mount's
// ownership (pkg/ownership: runAsUser, fsGroup is the kubelet's), the Events' references
// and the exit coordinator read, so that a node with many large pods costs little memory.
// It builds a new object rather than editing its input, and is idempotent, as client-go's
// transforms must be. Pods that do not use the driver (driverpod.Uses, installed as
// driverName) keep only their identity and node, so the cache still knows them (and their
// deletion) at almost no cost. A field a rule starts reading must be kept here: the test
// fails otherwise.
func Trim(pod *corev1.Pod, driverName string) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:                       pod.Name,
			Namespace:                  pod.Namespace,
			UID:                        pod.UID,
			ResourceVersion:            pod.ResourceVersion,
			CreationTimestamp:          pod.CreationTimestamp,
			DeletionTimestamp:          pod.DeletionTimestamp,
			DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
		},
		Spec: corev1.PodSpec{NodeName: pod.Spec.NodeName},
	}
	if !driverpod.Uses(pod, driverName) {
		return out
	}

	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, contract.AnnotationPrefix) {
			if out.Annotations == nil {
				out.Annotations = make(map[string]string)
			}
			out.Annotations[k] = v
		}
	}

	out.Spec.RestartPolicy = pod.Spec.RestartPolicy
	out.Spec.TerminationGracePeriodSeconds = pod.Spec.TerminationGracePeriodSeconds
	if sc := pod.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		out.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: sc.RunAsUser}
	}
	for _, c := range pod.Spec.InitContainers {
		out.Spec.InitContainers = append(out.Spec.InitContainers, trimContainer(c))
	}
	for _, c := range pod.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, trimContainer(c))
	}
	for _, v := range pod.Spec.Volumes {
		tv := corev1.Volume{Name: v.Name}
		switch {
		case v.CSI != nil:
			tv.CSI = &corev1.CSIVolumeSource{Driver: v.CSI.Driver}
		case v.EmptyDir != nil:
			tv.EmptyDir = &corev1.EmptyDirVolumeSource{Medium: v.EmptyDir.Medium}
		case v.PersistentVolumeClaim != nil:
			tv.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.PersistentVolumeClaim.ClaimName}
		case v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
			// A generic ephemeral volume: its claim, possibly the driver's (driverpod.Claim).
			tv.Ephemeral = &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}
		}
		out.Spec.Volumes = append(out.Spec.Volumes, tv)
	}

	out.Status.Phase = pod.Status.Phase
	out.Status.InitContainerStatuses = trimStatuses(pod.Status.InitContainerStatuses)
	out.Status.ContainerStatuses = trimStatuses(pod.Status.ContainerStatuses)
	return out
}

// trimContainer keeps what the lifecycle rules and the mount's ownership read: the name,
// the restart policy (native sidecars), the names of the volumes it mounts, its runAsUser
// (pkg/ownership) and, of the sidecar, the variables in which the webhook listed the
// containers that use the mounts (lifecycle.SidecarUsers).
func trimContainer(c corev1.Container) corev1.Container {
	out := corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy}
	for _, m := range c.VolumeMounts {
		out.VolumeMounts = append(out.VolumeMounts, corev1.VolumeMount{Name: m.Name})
	}
	if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil {
		out.SecurityContext = &corev1.SecurityContext{RunAsUser: sc.RunAsUser}
	}
	if c.Name == contract.SidecarContainerName {
		for _, e := range c.Env {
			if slices.Contains(UsersEnvNames, e.Name) {
				out.Env = append(out.Env, corev1.EnvVar{Name: e.Name, Value: e.Value})
			}
		}
	}
	return out
}

// trimStatuses keeps the states Decide and SidecarFailure read. Termination messages (up to
// 4 KiB each) are kept only for the sidecar, the one whose message is reported.
func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if in == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(in))
	for _, s := range in {
		keepMessage := s.Name == contract.SidecarContainerName
		out = append(out, corev1.ContainerStatus{
			Name:                 s.Name,
			ContainerID:          s.ContainerID,
			Ready:                s.Ready,
			RestartCount:         s.RestartCount,
			State:                trimState(s.State, keepMessage),
			LastTerminationState: trimState(s.LastTerminationState, keepMessage),
		})
	}
	return out
}

func trimState(in corev1.ContainerState, keepMessage bool) corev1.ContainerState {
	var out corev1.ContainerState
	if in.Waiting != nil {
		out.Waiting = &corev1.ContainerStateWaiting{Reason: in.Waiting.Reason}
	}
	if in.Running != nil {
		out.Running = &corev1.ContainerStateRunning{StartedAt: in.Running.StartedAt}
	}
	if t := in.Terminated; t != nil {
		out.Terminated = &corev1.ContainerStateTerminated{
			ExitCode:   t.ExitCode,
			Signal:     t.Signal,
			Reason:     t.Reason,
			StartedAt:  t.StartedAt,
			FinishedAt: t.FinishedAt,
		}
		if keepMessage {
			out.Terminated.Message = t.Message
		}
	}
	return out
}
