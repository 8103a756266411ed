package lifecycle

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// shipperPod is a native pod with the user's native log shipper after our sidecar and a
// native proxy that does not mount a volume; users is what the webhook listed in
// contract.EnvSidecarUsers ("" for none).
func shipperPod(users string, opts ...podOpt) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	p := nativePod([]string{"main"}, opts...)
	p.Spec.InitContainers = append(p.Spec.InitContainers,
		corev1.Container{Name: "shipper", RestartPolicy: &always},
		corev1.Container{Name: "proxy", RestartPolicy: &always})
	if users != "" {
		sc := &p.Spec.InitContainers[0]
		sc.Env = append(sc.Env, corev1.EnvVar{Name: contract.EnvSidecarUsers, Value: users})
	}
	return p
}

// The user's native sidecar that mounts the bucket (a log shipper flushing on SIGTERM) is
// waited for after the workload: its final object is written before gcsfuse stops. One that
// does not mount it (a proxy) is not.
func TestDecideWaitsForTheUsersNativeSidecars(t *testing.T) {
	for _, tt := range []struct {
		name     string
		pod      *corev1.Pod
		wantDone bool
		wantRule Rule
	}{
		{"Never: app done, shipper still running",
			shipperPod("shipper", statuses(terminated("main", 0, t1)), initStatuses(running("shipper"), running("proxy"))),
			false, RuleSidecarUserRunning},
		{"Never: app done, shipper exited after its SIGTERM (143), proxy stopped too",
			shipperPod("shipper", statuses(terminated("main", 0, t1)), initStatuses(terminated("shipper", 143, t2), terminated("proxy", 0, t1))),
			true, RuleNeverAllTerminated},
		{"Never: app done, shipper exited, a proxy still runs: the kubelet stops ours",
			shipperPod("shipper", statuses(terminated("main", 0, t1)), initStatuses(terminated("shipper", 143, t2), running("proxy"))),
			false, RuleNativeSidecarRunning},
		{"OnFailure: app succeeded, shipper running",
			shipperPod("shipper", restart(corev1.RestartPolicyOnFailure), statuses(terminated("main", 0, t1)), initStatuses(running("shipper"))),
			false, RuleSidecarUserRunning},
		{"deleting: app stopped, shipper running",
			shipperPod("shipper", deleting(), statuses(terminated("main", 0, t1)), initStatuses(running("shipper"))),
			false, RuleSidecarUserRunning},
		{"deleting: all stopped",
			shipperPod("shipper", deleting(), statuses(terminated("main", 0, t1)), initStatuses(terminated("shipper", 0, t2))),
			true, RuleDeletingAllTerminated},
		{"deleting: native sidecars that do not mount the bucket are not waited for",
			shipperPod("", deleting(), statuses(terminated("main", 0, t1)), initStatuses(running("shipper"), running("proxy"))),
			true, RuleDeletingAllTerminated},
		{"Never: native sidecars that do not mount the bucket still run: ours waits for the kubelet",
			shipperPod("", statuses(terminated("main", 0, t1)), initStatuses(running("shipper"), running("proxy"))),
			false, RuleNativeSidecarRunning},
		{"legacy pods list none",
			legacyPod([]string{"main"}, statuses(terminated("main", 0, t1))),
			true, RuleNeverAllTerminated},
		{"app still running: the workload rule speaks first",
			shipperPod("shipper", statuses(running("main")), initStatuses(running("shipper"))),
			false, RuleWorkloadRunning},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.pod)
			if d.Done != tt.wantDone || d.Rule != tt.wantRule {
				t.Fatalf("Decide = done %v rule %s (%s); want done %v rule %s", d.Done, d.Rule, d.Reason, tt.wantDone, tt.wantRule)
			}
			if d.Done && tt.wantRule == RuleNeverAllTerminated && len(SidecarUsers(tt.pod)) > 0 && !d.WorkloadFinishedAt.Equal(t2) {
				t.Fatalf("finished at %v, want the shipper's exit %v", d.WorkloadFinishedAt, t2)
			}
		})
	}
}

func TestMountUsersIncludeTheUsersNativeSidecars(t *testing.T) {
	p := shipperPod(" shipper ,")
	if got, want := MountUsers(p), []string{"main", "shipper"}; !slices.Equal(got, want) {
		t.Fatalf("MountUsers = %q, want %q", got, want)
	}
	deleted := shipperPod("shipper", deleting(), statuses(terminated("main", 0, t1)), initStatuses(running("shipper")))
	if d, ok := NeedsRuntimeFollow(deleted); !ok || d.Rule != RuleSidecarUserRunning {
		t.Fatalf("NeedsRuntimeFollow = %v, %v; a deleted pod whose shipper runs must be followed", d.Rule, ok)
	}
}

// An Istio-shaped pod: the mesh's native proxy comes before ours. Ours must not exit by
// itself when the app is done (the kubelet would restart it and never end the pod); it
// ends at the kubelet's SIGTERM, which comes before the proxy's. A legacy sidecar is a
// regular container and is not restarted: it exits as usual.
func TestDecideLeavesANativeSidecarBesideAProxyToTheKubelet(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	istio := func(p *corev1.Pod) {
		p.Spec.InitContainers = append([]corev1.Container{{Name: "istio-proxy", RestartPolicy: &always}}, p.Spec.InitContainers...)
	}
	native := nativePod([]string{"main"}, statuses(terminated("main", 0, t1)), initStatuses(running("istio-proxy")))
	istio(native)
	if d := Decide(native); d.Done || d.Rule != RuleNativeSidecarRunning {
		t.Fatalf("native beside istio-proxy: done %v rule %s; want not done, %s", d.Done, d.Rule, RuleNativeSidecarRunning)
	}
	legacy := legacyPod([]string{"main"}, statuses(terminated("main", 0, t1)), initStatuses(running("istio-proxy")))
	istio(legacy)
	if d := Decide(legacy); !d.Done {
		t.Fatalf("legacy beside istio-proxy: %s (%s); want done", d.Rule, d.Reason)
	}
}
