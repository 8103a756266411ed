// Package lifecycle holds the rules of the gcsfuse sidecar's lifecycle, free of I/O, so
// that they can be tested exhaustively and reused by every caller: the node plugin and the
// webhook call them and keep only the effects (reading the API, the runtime and files,
// writing files, logs, Events, metrics). Ending the sidecar too early loses data still being
// written through the mount; ending it too late keeps a Job's pod Running forever.
//
//   - when the workload is done: Decide, on the API's statuses or on the runtime's view of
//     them (WithRuntimeStates);
//   - who uses the mounts: MountUsers, WorkloadContainers, RegularInitContainers,
//     SidecarUsers, and at admission InitContainerUsers and NativeSidecarUsers;
//   - when a stopping pod must be followed in the runtime, and when its follower may release
//     it: NeedsRuntimeFollow, FollowVerdict, ReleaseConfirmation; for how long:
//     AppliedGraceSeconds;
//   - whether a sidecar has ended for good (SidecarGone) or failed (SidecarFailure), and
//     whether a native pod's init phase is over (InitContainersSucceeded).
//
// The sidecar's own rules (what a SIGTERM means, when a drain ends) are in
// lifecycle/sidecarrule, which the sidecar links without the Kubernetes types.
package lifecycle

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Rule names the rule that produced a Decision. The values are stable: they are used as
// metric labels, in logs and in Events, so they must never be renamed.
type Rule string

// Rules that leave the sidecar running (Decision.Done == false).
const (
	// RuleNoSidecar: the pod has no gcsfuse sidecar (or has one that is neither a native
	// sidecar nor a regular container), so there is nothing to end.
	RuleNoSidecar Rule = "no-sidecar"
	// RuleNoWorkload: every regular container is the sidecar or ignored. With no workload
	// there is no moment at which "the workload is done", so the sidecar is left alone.
	RuleNoWorkload Rule = "no-workload-containers"
	// RuleRestartAlways: restartPolicy Always restarts every container that exits, so the
	// workload is never done while the pod is not being deleted.
	RuleRestartAlways Rule = "restart-always"
	// RuleWorkloadRunning: at least one workload container has not terminated yet
	// (running, waiting to start, or without any status).
	RuleWorkloadRunning Rule = "workload-running"
	// RuleOnFailureWillRestart: restartPolicy OnFailure and a workload container exited
	// non-zero or is waiting to be restarted after a failure; the kubelet will run it again.
	RuleOnFailureWillRestart Rule = "onfailure-will-restart"
	// RuleDeletingWorkloadRunning: the pod is being deleted but a workload container is still
	// running; the sidecar must keep serving it until it stops.
	RuleDeletingWorkloadRunning Rule = "deleting-workload-running"
	// RuleSidecarUserRunning: the workload is done (or the pod is being deleted and it has
	// stopped), but a native sidecar of the user's that mounts a volume (a log shipper
	// flushing on SIGTERM) still runs. The kubelet stops it before ours; gcsfuse serves it
	// until it has exited.
	RuleSidecarUserRunning Rule = "sidecar-user-running"
	// RuleNativeSidecarRunning: the workload is done and the pod is not being deleted, but
	// another native sidecar (a mesh proxy, before or after ours) still runs. The kubelet
	// restarts a native sidecar that exits by itself while another one runs (it then takes
	// the pod for one still initialising, and never stops it: measured on 1.34, the pod
	// stayed Running with ours in CrashLoopBackOff); it stops them all itself, ours in turn,
	// once the regular containers are done, so ours waits for its SIGTERM.
	RuleNativeSidecarRunning Rule = "native-sidecar-running"
)

// Rules that end the sidecar (Decision.Done == true).
const (
	// RulePodPhaseTerminal: the pod phase is Succeeded or Failed.
	RulePodPhaseTerminal Rule = "pod-phase-terminal"
	// RuleNeverAllTerminated: restartPolicy Never and every workload container terminated,
	// whatever its exit code (nothing will run again).
	RuleNeverAllTerminated Rule = "never-all-terminated"
	// RuleOnFailureAllSucceeded: restartPolicy OnFailure and every workload container
	// terminated with exit code 0 (nothing will be restarted).
	RuleOnFailureAllSucceeded Rule = "onfailure-all-succeeded"
	// RuleDeletingAllTerminated: the pod is being deleted and every workload container has
	// stopped; nothing can use the mount any more, whatever the restart policy.
	RuleDeletingAllTerminated Rule = "deleting-all-terminated"
)

// Decision is the outcome of Decide.
type Decision struct {
	// Done reports that the workload is finished and the sidecar must exit now.
	Done bool
	// Mode is contract.ModeNative, contract.ModeLegacy, or "" when the pod has no sidecar.
	Mode string
	// Rule is the machine-readable name of the rule that decided.
	Rule Rule
	// Reason is a human explanation, suitable for logs and Events.
	Reason string
	// WorkloadFinishedAt is the latest finishedAt among the workload containers, set when
	// Done and at least one of them reports one. It is the start of the
	// "workload done -> sidecar exit" latency.
	WorkloadFinishedAt time.Time
}

// Decide reports whether the workload of pod is done, so that its sidecar must be told to
// exit. The rules are the same in both modes: a native sidecar is an init container, so
// the workload is the regular containers either way, and telling a native sidecar at once
// spares the pod the kubelet's own, later, stop of it. It never mutates pod. It only reads the container and init
// container names, the sidecar init container's restartPolicy, the pod's restartPolicy,
// annotations, deletionTimestamp, phase and container statuses.
func Decide(pod *corev1.Pod) Decision {
	mode := SidecarMode(pod)
	if mode == "" {
		return Decision{Rule: RuleNoSidecar, Reason: "pod has no " + contract.SidecarContainerName + " container"}
	}

	d := Decision{Mode: mode}
	workload := WorkloadContainers(pod)
	if len(workload) == 0 {
		d.Rule, d.Reason = RuleNoWorkload, "pod has no workload container besides the sidecar and ignored containers"
		return d
	}

	statuses := make(map[string]*corev1.ContainerStatus, len(pod.Status.ContainerStatuses))
	for i := range pod.Status.ContainerStatuses {
		statuses[pod.Status.ContainerStatuses[i].Name] = &pod.Status.ContainerStatuses[i]
	}

	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// The kubelet has given up on every container; finishedAt is best effort.
		d.Done, d.Rule = true, RulePodPhaseTerminal
		d.Reason = fmt.Sprintf("pod phase is %s", pod.Status.Phase)
		for _, name := range workload {
			if t := terminatedState(statuses[name], true); t != nil {
				d.WorkloadFinishedAt = later(d.WorkloadFinishedAt, t.FinishedAt.Time)
			}
		}
		return d
	}

	if pod.DeletionTimestamp != nil {
		// Deletion: the containers will not be restarted any more, so a container that has
		// exited, or is waiting in a back-off after having run, is finished for good.
		for _, name := range workload {
			t := terminatedState(statuses[name], true)
			if t == nil {
				d.Rule = RuleDeletingWorkloadRunning
				d.Reason = fmt.Sprintf("pod is being deleted; workload container %q has not terminated", name)
				d.WorkloadFinishedAt = time.Time{}
				return d
			}
			d.WorkloadFinishedAt = later(d.WorkloadFinishedAt, t.FinishedAt.Time)
		}
		if waitSidecarUsers(pod, &d) {
			return d
		}
		d.Done, d.Rule = true, RuleDeletingAllTerminated
		d.Reason = fmt.Sprintf("pod is being deleted and all %d workload containers have terminated", len(workload))
		return d
	}

	policy := pod.Spec.RestartPolicy
	switch policy {
	case corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure:
	default:
		// Always, or unset (the API server defaults it to Always).
		d.Rule, d.Reason = RuleRestartAlways, "restartPolicy Always: workload containers are restarted when they exit"
		return d
	}

	for _, name := range workload {
		st := statuses[name]
		t := terminatedState(st, false)
		if t == nil {
			if policy == corev1.RestartPolicyOnFailure && terminatedState(st, true) != nil {
				// Waiting in a back-off after a failed run: the kubelet will start it again.
				d.Rule = RuleOnFailureWillRestart
				d.Reason = fmt.Sprintf("restartPolicy OnFailure: workload container %q is waiting to be restarted", name)
			} else {
				d.Rule = RuleWorkloadRunning
				d.Reason = fmt.Sprintf("workload container %q has not terminated", name)
			}
			d.WorkloadFinishedAt = time.Time{}
			return d
		}
		if policy == corev1.RestartPolicyOnFailure && t.ExitCode != 0 {
			d.Rule = RuleOnFailureWillRestart
			d.Reason = fmt.Sprintf("restartPolicy OnFailure: workload container %q exited with code %d and will be restarted", name, t.ExitCode)
			d.WorkloadFinishedAt = time.Time{}
			return d
		}
		d.WorkloadFinishedAt = later(d.WorkloadFinishedAt, t.FinishedAt.Time)
	}
	if waitSidecarUsers(pod, &d) || waitOtherNativeSidecars(pod, &d) {
		return d
	}

	d.Done = true
	if policy == corev1.RestartPolicyNever {
		d.Rule = RuleNeverAllTerminated
		d.Reason = fmt.Sprintf("restartPolicy Never: all %d workload containers have terminated", len(workload))
	} else {
		d.Rule = RuleOnFailureAllSucceeded
		d.Reason = fmt.Sprintf("restartPolicy OnFailure: all %d workload containers exited with code 0", len(workload))
	}
	return d
}

// SidecarUsers returns the user's own native sidecars that mount a gcsfuse volume, as the
// webhook found them at admission (NativeSidecarUsers, inline volumes and claims alike) and
// listed them in the native sidecar's contract.EnvSidecarUsers; nil for a legacy pod (there the user's native
// sidecars outlive every regular container, ours included, so nothing can wait for them).
func SidecarUsers(pod *corev1.Pod) []string {
	if c := nativeSidecar(pod); c != nil {
		u, _ := readUsers(c)
		return u.Sidecars
	}
	return nil
}

// nativeSidecar returns our sidecar when it runs as a native sidecar (an init container with
// restartPolicy Always), nil otherwise.
func nativeSidecar(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name == contract.SidecarContainerName && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return c
		}
	}
	return nil
}

// waitSidecarUsers is the last rule before a workload counts as done: every native sidecar
// of the user's that mounts a volume has terminated too, whatever its exit code (the
// kubelet does not restart sidecars once it stops them). It sets d and reports true while
// one still runs; otherwise it adds their finish times to d.
func waitSidecarUsers(pod *corev1.Pod, d *Decision) bool {
	finished := d.WorkloadFinishedAt
	for _, name := range SidecarUsers(pod) {
		t := terminatedState(findStatus(pod.Status.InitContainerStatuses, name), false)
		if t == nil {
			d.Rule = RuleSidecarUserRunning
			d.Reason = fmt.Sprintf("workload done, but native sidecar %q, which mounts a gcsfuse volume, has not terminated", name)
			d.WorkloadFinishedAt = time.Time{}
			return true
		}
		finished = later(finished, t.FinishedAt.Time)
	}
	d.WorkloadFinishedAt = finished
	return false
}

// waitOtherNativeSidecars keeps a native sidecar from exiting by itself while another
// native sidecar of the pod has not terminated (RuleNativeSidecarRunning); it sets d and
// reports true in that case. Used only when the pod is not being deleted: a pod being
// deleted is stopped whole, and nothing restarts our sidecar then.
func waitOtherNativeSidecars(pod *corev1.Pod, d *Decision) bool {
	if d.Mode != contract.ModeNative {
		return false
	}
	for _, name := range OtherNativeSidecars(pod) {
		// No status at all: never seen running (the API has not reported it yet, and the
		// runtime view, WithRuntimeStates, lists no container of that name).
		st := findStatus(pod.Status.InitContainerStatuses, name)
		if st != nil && terminatedState(st, false) == nil {
			d.Rule = RuleNativeSidecarRunning
			d.Reason = fmt.Sprintf("workload done, but native sidecar %q still runs: the kubelet stops it and ours together (ours would be restarted if it exited first)", name)
			d.WorkloadFinishedAt = time.Time{}
			return true
		}
	}
	return false
}

// OtherNativeSidecars returns, in spec order, the names of a native-sidecar pod's other
// native sidecars (init containers with restartPolicy: Always, not ours); nil for a legacy
// pod. SidecarUsers is the subset that mounts a volume.
func OtherNativeSidecars(pod *corev1.Pod) []string {
	if SidecarMode(pod) != contract.ModeNative {
		return nil
	}
	var names []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name != contract.SidecarContainerName && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			names = append(names, c.Name)
		}
	}
	return names
}

// splitNames splits a comma-separated list of container names, trimming spaces and
// dropping empty entries.
func splitNames(raw string) []string {
	var names []string
	for _, part := range strings.Split(raw, ",") {
		if name := strings.TrimSpace(part); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// SidecarMode reports how the sidecar was injected: contract.ModeNative when it is an init
// container with restartPolicy Always, contract.ModeLegacy when it is a regular container, and
// "" when the pod has no usable sidecar. A plain (run-to-completion) init container with the
// sidecar's name is not a sidecar: it would block the pod, and no rule here can fix that.
func SidecarMode(pod *corev1.Pod) string {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name == contract.SidecarContainerName &&
			c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return contract.ModeNative
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == contract.SidecarContainerName {
			return contract.ModeLegacy
		}
	}
	return ""
}

// WorkloadContainers returns, in spec order, the names of the regular containers whose end
// means the end of the workload: every entry of pod.Spec.Containers except the sidecar and
// the containers named in the contract.AnnotationIgnoreContainers annotation (for example a
// legacy istio-proxy that itself waits for the other containers), and the GKE driver's
// sidecar (contract.IncumbentSidecarContainerName), which waits for the workload itself. Init containers are never
// workload: they finish before the workload starts or, as native sidecars, serve it.
func WorkloadContainers(pod *corev1.Pod) []string {
	ignored := IgnoredContainers(pod)
	var names []string
	for i := range pod.Spec.Containers {
		name := pod.Spec.Containers[i].Name
		if name == contract.SidecarContainerName || name == contract.IncumbentSidecarContainerName {
			continue
		}
		if _, skip := ignored[name]; skip {
			continue
		}
		names = append(names, name)
	}
	return names
}

// IgnoredContainers parses the contract.AnnotationIgnoreContainers annotation: a comma
// separated list of container names, whitespace around names ignored, empty entries skipped.
func IgnoredContainers(pod *corev1.Pod) map[string]struct{} {
	raw := pod.Annotations[contract.AnnotationIgnoreContainers]
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	set := make(map[string]struct{})
	for _, part := range strings.Split(raw, ",") {
		if name := strings.TrimSpace(part); name != "" {
			set[name] = struct{}{}
		}
	}
	return set
}

// SidecarFailure reports that the sidecar container terminated with a non-zero exit code, so
// the node plugin can emit an Event explaining why the pod's mounts broke. It looks at the
// current state and, because a restarted sidecar (native sidecars always are) may never be
// observed in its terminated state, also at the last termination state. message is the
// sidecar's termination message, which carries the failure reason; when the sidecar wrote
// none it falls back to the kubelet's reason (for example "OOMKilled" or "Error").
func SidecarFailure(pod *corev1.Pod) (failed bool, exitCode int32, message string) {
	t := sidecarFailedTermination(pod)
	if t == nil {
		return false, 0, ""
	}
	message = strings.TrimSpace(t.Message)
	if message == "" {
		message = t.Reason
	}
	return true, t.ExitCode, message
}

// SidecarFailedRun identifies the sidecar run that SidecarFailure reports, so that each
// failed run is reported once: a restarted sidecar that fails again (for example one that
// found the volumes its predecessor lost) has news for the user. It is "" when
// SidecarFailure reports nothing.
func SidecarFailedRun(pod *corev1.Pod) string {
	t := sidecarFailedTermination(pod)
	if t == nil {
		return ""
	}
	return fmt.Sprintf("%d@%s/%s", t.ExitCode, t.StartedAt.UTC().Format(time.RFC3339), t.FinishedAt.UTC().Format(time.RFC3339))
}

// sidecarFailedTermination is the sidecar's latest non-zero termination: its current state,
// else its last termination state (a restarted sidecar may never be seen terminated).
func sidecarFailedTermination(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	var st *corev1.ContainerStatus
	switch SidecarMode(pod) {
	case contract.ModeNative:
		st = findStatus(pod.Status.InitContainerStatuses, contract.SidecarContainerName)
	case contract.ModeLegacy:
		st = findStatus(pod.Status.ContainerStatuses, contract.SidecarContainerName)
	}
	if st == nil {
		return nil
	}
	t := st.State.Terminated
	if t == nil || t.ExitCode == 0 {
		t = st.LastTerminationState.Terminated
	}
	if t == nil || t.ExitCode == 0 {
		return nil
	}
	return t
}

// terminatedState returns the state in which a container last terminated, or nil if it has
// not terminated. With afterRun, a container waiting after having run (for example in
// CrashLoopBackOff) counts as terminated through its last termination state: that is true
// during deletion and in a terminal phase, where the kubelet will not start it again.
func terminatedState(st *corev1.ContainerStatus, afterRun bool) *corev1.ContainerStateTerminated {
	if st == nil {
		return nil
	}
	if st.State.Terminated != nil {
		return st.State.Terminated
	}
	if afterRun && st.State.Waiting != nil && st.LastTerminationState.Terminated != nil {
		return st.LastTerminationState.Terminated
	}
	return nil
}

func findStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
