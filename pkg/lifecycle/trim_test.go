package lifecycle

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/driverpod"
)

// rulePods are the pods of the rule tables and a few richer ones: every field a rule reads
// is set in one of them.
func rulePods() map[string]*corev1.Pod {
	pods := map[string]*corev1.Pod{}
	for _, tc := range decideCases() {
		pods["decide: "+tc.name] = tc.pod
	}
	for _, tc := range sidecarFailureCases() {
		pods["sidecar failure: "+tc.name] = tc.pod
	}
	n := func(v int64) *int64 { return &v }
	always := corev1.ContainerRestartPolicyAlways

	// A native pod deleted with a grace period during its init phase, the webhook's users
	// lists on the sidecar (prep does not mount a volume, seed does), the user's native
	// shipper, uids, a claim and an ephemeral volume.
	p := shipperPod("shipper", deleting(), initContainers("prep", "seed"), statuses(running("main")),
		initStatuses(running(contract.SidecarContainerName), running("seed"), running("shipper")))
	p.DeletionGracePeriodSeconds, p.Spec.TerminationGracePeriodSeconds = n(7), n(60)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: n(1000)}
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: n(1001)}
	sc := &p.Spec.InitContainers[0]
	sc.Env = append(sc.Env, corev1.EnvVar{Name: contract.EnvInitContainers, Value: "seed"}, corev1.EnvVar{Name: "UNRELATED", Value: "x"})
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "late", RestartPolicy: &always})
	p.Spec.Volumes = []corev1.Volume{
		{Name: "inline", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName, VolumeAttributes: map[string]string{"bucketName": "b"}}}},
		{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
		{Name: "eph", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}}},
	}
	pods["native, deleted during init, users listed"] = p
	// The same sidecar injected by an older webhook: no users lists.
	old := p.DeepCopy()
	old.Spec.InitContainers[0].Env = nil
	pods["native, no users lists"] = old
	// A running pod whose grace period is only its spec's.
	graced := nativePod([]string{"main"}, statuses(running("main")))
	graced.Spec.TerminationGracePeriodSeconds = n(45)
	pods["native, spec grace only"] = graced
	// A legacy pod whose init containers ran, with ignored containers.
	pods["legacy, ignored containers"] = legacyPod([]string{"a", "istio-proxy"}, initContainers("init"),
		annotate(contract.AnnotationIgnoreContainers, "istio-proxy"), statuses(running(contract.SidecarContainerName), terminated("a", 0, t1), running("istio-proxy")))
	return pods
}

// Trim keeps every field the rules, the classifier and the mount's ownership read: on each
// rule pod, every rule answers the same of the pod and of Trim(pod). A rule that starts
// reading a field Trim drops fails here, not on a node whose pod watch cached the trimmed
// pod (the pod watch keeps only Trim's view).
func TestTrimKeepsWhatTheRulesRead(t *testing.T) {
	rules := map[string]func(*corev1.Pod) any{
		"Decide":                  func(p *corev1.Pod) any { return Decide(p) },
		"NeedsRuntimeFollow":      func(p *corev1.Pod) any { d, ok := NeedsRuntimeFollow(p); return fmt.Sprint(d, ok) },
		"MountUsers":              func(p *corev1.Pod) any { return MountUsers(p) },
		"InitUsers":               func(p *corev1.Pod) any { return InitUsers(p) },
		"SidecarUsers":            func(p *corev1.Pod) any { return SidecarUsers(p) },
		"OtherNativeSidecars":     func(p *corev1.Pod) any { return OtherNativeSidecars(p) },
		"SidecarMode":             func(p *corev1.Pod) any { return SidecarMode(p) },
		"WorkloadContainers":      func(p *corev1.Pod) any { return WorkloadContainers(p) },
		"RuntimeViewContainers":   func(p *corev1.Pod) any { return RuntimeViewContainers(p) },
		"InitContainersSucceeded": func(p *corev1.Pod) any { return InitContainersSucceeded(p) },
		"SidecarFailure":          func(p *corev1.Pod) any { f, c, m := SidecarFailure(p); return fmt.Sprint(f, c, m) },
		"SidecarFailedRun":        func(p *corev1.Pod) any { return SidecarFailedRun(p) },
		"SidecarGone":             func(p *corev1.Pod) any { return SidecarGone(p) },
		"AppliedGraceSeconds":     func(p *corev1.Pod) any { return AppliedGraceSeconds(p) },
		"driverpod.OnNode":        func(p *corev1.Pod) any { return driverpod.OnNode(p, contract.DriverName) },
		"runAsUser":               func(p *corev1.Pod) any { return runAsUsers(p) },
	}
	checked := 0
	for name, p := range rulePods() {
		trimmed := Trim(p, contract.DriverName)
		if again := Trim(trimmed, contract.DriverName); !reflect.DeepEqual(again, trimmed) {
			t.Errorf("%s: Trim is not idempotent", name)
		}
		if !driverpod.Uses(p, contract.DriverName) {
			// Another driver's pod: the node plugin applies no rule to it, and keeps of it
			// only what tells it is there (and gone).
			if trimmed.Name != p.Name || trimmed.UID != p.UID || trimmed.Spec.NodeName != p.Spec.NodeName || len(trimmed.Spec.Containers) != 0 {
				t.Errorf("%s: not the driver's, kept %+v", name, trimmed)
			}
			continue
		}
		checked++
		for rule, f := range rules {
			if want, got := f(p), f(trimmed); !reflect.DeepEqual(want, got) {
				t.Errorf("%s: %s of the pod is %v, of Trim(pod) %v", name, rule, want, got)
			}
		}
	}
	if checked < 40 {
		t.Errorf("%d driver pods checked; the rule tables have more", checked)
	}
}

// runAsUsers are the uids pkg/ownership reads: the pod's and each container's.
func runAsUsers(p *corev1.Pod) []string {
	var out []string
	if sc := p.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		out = append(out, fmt.Sprint("pod=", *sc.RunAsUser))
	}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
				out = append(out, fmt.Sprint(c.Name, "=", *c.SecurityContext.RunAsUser))
			}
		}
	}
	return out
}
