package lifecycle

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

var (
	t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(7 * time.Second)
	t2 = t0.Add(42 * time.Second)
)

// podOpt mutates a test pod; legacyPod applies them in order.
type podOpt func(*corev1.Pod)

// legacyPod is a pod with a legacy (regular container) sidecar followed by the named workload
// containers, restartPolicy Never unless an option says otherwise.
func legacyPod(containers []string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: contract.SidecarContainerName}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func restart(policy corev1.RestartPolicy) podOpt {
	return func(p *corev1.Pod) { p.Spec.RestartPolicy = policy }
}

func deleting() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t2.Add(time.Hour)} }
}

func phase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func annotate(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func statuses(st ...corev1.ContainerStatus) podOpt {
	return func(p *corev1.Pod) { p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, st...) }
}

func initContainers(names ...string) podOpt {
	return func(p *corev1.Pod) {
		for _, n := range names {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: n})
		}
	}
}

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{
		Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: t0}}}}
}

func terminated(name string, code int32, at time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.Time{Time: at}}}}
}

// backOff is a container waiting to be restarted after it exited with code at time at.
func backOff(name string, code int32, at time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.Time{Time: at}}},
		RestartCount: 1,
	}
}

// creating is a container that has never run.
func creating(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
}

func nativePod(containers []string, opts ...podOpt) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	p := legacyPod(containers, opts...)
	p.Spec.Containers = p.Spec.Containers[1:]
	p.Spec.InitContainers = append([]corev1.Container{{Name: contract.SidecarContainerName, RestartPolicy: &always}},
		p.Spec.InitContainers...)
	return p
}

// decideCase is one row of Decide's rule table.
type decideCase struct {
	name     string
	pod      *corev1.Pod
	wantDone bool
	wantRule Rule
	wantMode string
	wantAt   time.Time
}

// decideCases is Decide's rule table; TestTrimKeepsWhatTheRulesRead reads its pods too.
func decideCases() []decideCase {
	sc := running(contract.SidecarContainerName)
	return []decideCase{
		{
			name:     "Never: single container succeeded",
			pod:      legacyPod([]string{"main"}, statuses(sc, terminated("main", 0, t1))),
			wantDone: true, wantRule: RuleNeverAllTerminated, wantMode: contract.ModeLegacy, wantAt: t1,
		},
		{
			name:     "Never: single container failed is still done",
			pod:      legacyPod([]string{"main"}, statuses(sc, terminated("main", 3, t1))),
			wantDone: true, wantRule: RuleNeverAllTerminated, wantMode: contract.ModeLegacy, wantAt: t1,
		},
		{
			name:     "Never: mixed exit codes, finishedAt is the latest",
			pod:      legacyPod([]string{"a", "b", "c"}, statuses(terminated("a", 0, t2), terminated("b", 1, t0), terminated("c", 0, t1), sc)),
			wantDone: true, wantRule: RuleNeverAllTerminated, wantMode: contract.ModeLegacy, wantAt: t2,
		},
		{
			name:     "Never: one of several containers still running",
			pod:      legacyPod([]string{"a", "b"}, statuses(terminated("a", 0, t1), running("b"), sc)),
			wantRule: RuleWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "Never: container without status yet is not terminated",
			pod:      legacyPod([]string{"a", "b"}, statuses(terminated("a", 0, t1), sc)),
			wantRule: RuleWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "Never: container never started",
			pod:      legacyPod([]string{"a"}, phase(corev1.PodPending), statuses(creating("a"), creating(contract.SidecarContainerName))),
			wantRule: RuleWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "Never: sidecar's own termination is irrelevant while workload runs",
			pod:      legacyPod([]string{"main"}, statuses(running("main"), terminated(contract.SidecarContainerName, 0, t1))),
			wantRule: RuleWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "OnFailure: all succeeded",
			pod:      legacyPod([]string{"a", "b"}, restart(corev1.RestartPolicyOnFailure), statuses(terminated("a", 0, t1), terminated("b", 0, t0), sc)),
			wantDone: true, wantRule: RuleOnFailureAllSucceeded, wantMode: contract.ModeLegacy, wantAt: t1,
		},
		{
			name:     "OnFailure: failed container will be restarted",
			pod:      legacyPod([]string{"a", "b"}, restart(corev1.RestartPolicyOnFailure), statuses(terminated("a", 0, t1), terminated("b", 2, t2), sc)),
			wantRule: RuleOnFailureWillRestart, wantMode: contract.ModeLegacy,
		},
		{
			// The runtime view (WithRuntimeStates) gives UnknownExitCode for an exit code the
			// runtime could not give: it may have failed, so the kubelet may restart it.
			name:     "OnFailure: unknown exit code (-1) will be restarted",
			pod:      legacyPod([]string{"a"}, restart(corev1.RestartPolicyOnFailure), statuses(terminated("a", UnknownExitCode, t1), sc)),
			wantRule: RuleOnFailureWillRestart, wantMode: contract.ModeLegacy,
		},
		{
			name:     "OnFailure: failed container in back-off",
			pod:      legacyPod([]string{"a"}, restart(corev1.RestartPolicyOnFailure), statuses(backOff("a", 1, t1), sc)),
			wantRule: RuleOnFailureWillRestart, wantMode: contract.ModeLegacy,
		},
		{
			name:     "OnFailure: restarted container running again",
			pod:      legacyPod([]string{"a"}, restart(corev1.RestartPolicyOnFailure), statuses(running("a"), sc)),
			wantRule: RuleWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "Always: terminated containers are not done",
			pod:      legacyPod([]string{"a"}, restart(corev1.RestartPolicyAlways), statuses(terminated("a", 0, t1), sc)),
			wantRule: RuleRestartAlways, wantMode: contract.ModeLegacy,
		},
		{
			name:     "unset restartPolicy means Always",
			pod:      legacyPod([]string{"a"}, restart(""), statuses(terminated("a", 0, t1), sc)),
			wantRule: RuleRestartAlways, wantMode: contract.ModeLegacy,
		},
		{
			name:     "deleting: workload still running",
			pod:      legacyPod([]string{"a", "b"}, restart(corev1.RestartPolicyAlways), deleting(), statuses(terminated("a", 0, t1), running("b"), sc)),
			wantRule: RuleDeletingWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "deleting: Always pod with all workload terminated",
			pod:      legacyPod([]string{"a", "b"}, restart(corev1.RestartPolicyAlways), deleting(), statuses(terminated("a", 137, t2), terminated("b", 0, t1), sc)),
			wantDone: true, wantRule: RuleDeletingAllTerminated, wantMode: contract.ModeLegacy, wantAt: t2,
		},
		{
			name:     "deleting: OnFailure pod with a non-zero exit is done",
			pod:      legacyPod([]string{"a"}, restart(corev1.RestartPolicyOnFailure), deleting(), statuses(terminated("a", 1, t1), sc)),
			wantDone: true, wantRule: RuleDeletingAllTerminated, wantMode: contract.ModeLegacy, wantAt: t1,
		},
		{
			name:     "deleting: waiting after having run counts as terminated",
			pod:      legacyPod([]string{"a", "b"}, restart(corev1.RestartPolicyAlways), deleting(), statuses(backOff("a", 2, t2), terminated("b", 0, t1), sc)),
			wantDone: true, wantRule: RuleDeletingAllTerminated, wantMode: contract.ModeLegacy, wantAt: t2,
		},
		{
			name:     "deleting: waiting without having run is not terminated",
			pod:      legacyPod([]string{"a"}, deleting(), statuses(creating("a"), sc)),
			wantRule: RuleDeletingWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "deleting: running after a restart is not terminated",
			pod:      legacyPod([]string{"a"}, restart(corev1.RestartPolicyAlways), deleting(), statuses(func() corev1.ContainerStatus { s := backOff("a", 1, t0); s.State = running("a").State; return s }(), sc)),
			wantRule: RuleDeletingWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "init containers are not workload",
			pod:      legacyPod([]string{"main"}, initContainers("setup"), statuses(terminated("main", 0, t1), sc)),
			wantDone: true, wantRule: RuleNeverAllTerminated, wantMode: contract.ModeLegacy, wantAt: t1,
		},
		{
			name: "a running native istio init sidecar does not block",
			pod: legacyPod([]string{"main"}, func(p *corev1.Pod) {
				always := corev1.ContainerRestartPolicyAlways
				p.Spec.InitContainers = []corev1.Container{{Name: "istio-proxy", RestartPolicy: &always}}
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{running("istio-proxy")}
			}, statuses(terminated("main", 0, t1), sc)),
			wantDone: true, wantRule: RuleNeverAllTerminated, wantMode: contract.ModeLegacy, wantAt: t1,
		},
		{
			name: "istio-proxy ignored through the annotation",
			pod: legacyPod([]string{"istio-proxy", "main"},
				annotate(contract.AnnotationIgnoreContainers, " istio-proxy , ,other "),
				statuses(running("istio-proxy"), terminated("main", 0, t1), sc)),
			wantDone: true, wantRule: RuleNeverAllTerminated, wantMode: contract.ModeLegacy, wantAt: t1,
		},
		{
			name:     "istio-proxy without the annotation keeps the sidecar",
			pod:      legacyPod([]string{"istio-proxy", "main"}, statuses(running("istio-proxy"), terminated("main", 0, t1), sc)),
			wantRule: RuleWorkloadRunning, wantMode: contract.ModeLegacy,
		},
		{
			name:     "only the sidecar",
			pod:      legacyPod(nil, statuses(sc)),
			wantRule: RuleNoWorkload, wantMode: contract.ModeLegacy,
		},
		{
			name:     "every other container ignored",
			pod:      legacyPod([]string{"istio-proxy"}, annotate(contract.AnnotationIgnoreContainers, "istio-proxy"), phase(corev1.PodSucceeded)),
			wantRule: RuleNoWorkload, wantMode: contract.ModeLegacy,
		},
		{
			name:     "native sidecar: told as soon as the workload is done",
			pod:      nativePod([]string{"main"}, statuses(terminated("main", 0, t1))),
			wantDone: true, wantRule: RuleNeverAllTerminated, wantMode: contract.ModeNative, wantAt: t1,
		},
		{
			name:     "native sidecar: running workload",
			pod:      nativePod([]string{"main"}, statuses(running("main"))),
			wantRule: RuleWorkloadRunning, wantMode: contract.ModeNative,
		},
		{
			name:     "native sidecar: OnFailure failure will be restarted",
			pod:      nativePod([]string{"main"}, restart(corev1.RestartPolicyOnFailure), statuses(terminated("main", 1, t1))),
			wantRule: RuleOnFailureWillRestart, wantMode: contract.ModeNative,
		},
		{
			name:     "native sidecar: restartPolicy Always",
			pod:      nativePod([]string{"main"}, restart(corev1.RestartPolicyAlways), statuses(terminated("main", 0, t1))),
			wantRule: RuleRestartAlways, wantMode: contract.ModeNative,
		},
		{
			name:     "native sidecar: init phase (regular containers not started)",
			pod:      nativePod([]string{"main"}, initContainers("setup"), statuses(creating("main"))),
			wantRule: RuleWorkloadRunning, wantMode: contract.ModeNative,
		},
		{
			name:     "native sidecar while deleting",
			pod:      nativePod([]string{"main"}, deleting(), statuses(terminated("main", 0, t1))),
			wantDone: true, wantRule: RuleDeletingAllTerminated, wantMode: contract.ModeNative, wantAt: t1,
		},
		{
			name: "no sidecar",
			pod: func() *corev1.Pod {
				p := legacyPod([]string{"main"}, statuses(terminated("main", 0, t1)))
				p.Spec.Containers = p.Spec.Containers[1:]
				return p
			}(),
			wantRule: RuleNoSidecar,
		},
		{
			name: "plain init container named like the sidecar is not a sidecar",
			pod: func() *corev1.Pod {
				p := legacyPod([]string{"main"}, initContainers(contract.SidecarContainerName), statuses(terminated("main", 0, t1)))
				p.Spec.Containers = p.Spec.Containers[1:]
				return p
			}(),
			wantRule: RuleNoSidecar,
		},
		{
			name:     "phase Succeeded",
			pod:      legacyPod([]string{"a"}, restart(corev1.RestartPolicyAlways), phase(corev1.PodSucceeded), statuses(terminated("a", 0, t1), terminated(contract.SidecarContainerName, 0, t2))),
			wantDone: true, wantRule: RulePodPhaseTerminal, wantMode: contract.ModeLegacy, wantAt: t1,
		},
		{
			name:     "phase Failed without statuses",
			pod:      legacyPod([]string{"a"}, restart(corev1.RestartPolicyAlways), phase(corev1.PodFailed)),
			wantDone: true, wantRule: RulePodPhaseTerminal, wantMode: contract.ModeLegacy,
		},
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range decideCases() {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			got := Decide(tc.pod)
			if got.Done != tc.wantDone || got.Rule != tc.wantRule || got.Mode != tc.wantMode {
				t.Fatalf("Decide() = {Done:%v Rule:%q Mode:%q Reason:%q}, want {Done:%v Rule:%q Mode:%q}",
					got.Done, got.Rule, got.Mode, got.Reason, tc.wantDone, tc.wantRule, tc.wantMode)
			}
			if !got.WorkloadFinishedAt.Equal(tc.wantAt) {
				t.Errorf("WorkloadFinishedAt = %v, want %v", got.WorkloadFinishedAt, tc.wantAt)
			}
			if got.Reason == "" {
				t.Error("Reason is empty")
			}
			if !equalPods(before, tc.pod) {
				t.Error("Decide mutated the pod")
			}
		})
	}
}

func equalPods(a, b *corev1.Pod) bool {
	return a.String() == b.String()
}

func TestWorkloadContainers(t *testing.T) {
	p := legacyPod([]string{"a", "istio-proxy", "b", "log", contract.IncumbentSidecarContainerName}, initContainers("init"),
		annotate(contract.AnnotationIgnoreContainers, "istio-proxy,\tlog ,"))
	got := WorkloadContainers(p)
	want := []string{"a", "b"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("WorkloadContainers = %v, want %v", got, want)
	}
}

// sidecarFailureCase is one row of SidecarFailure's table.
type sidecarFailureCase struct {
	name     string
	pod      *corev1.Pod
	wantFail bool
	wantCode int32
	wantMsg  string
}

// sidecarFailureCases is SidecarFailure's table; TestTrimKeepsWhatTheRulesRead reads its
// pods too.
func sidecarFailureCases() []sidecarFailureCase {
	failedWith := func(code int32, msg, reason string) corev1.ContainerStatus {
		s := terminated(contract.SidecarContainerName, code, t1)
		s.State.Terminated.Message = msg
		s.State.Terminated.Reason = reason
		return s
	}
	return []sidecarFailureCase{
		{
			name:     "legacy sidecar exited non-zero with a message",
			pod:      legacyPod([]string{"main"}, statuses(running("main"), failedWith(1, "bucket \"b\" not found\n", "Error"))),
			wantFail: true, wantCode: 1, wantMsg: `bucket "b" not found`,
		},
		{
			name:     "no message falls back to the kubelet reason",
			pod:      legacyPod([]string{"main"}, statuses(running("main"), failedWith(137, "", "OOMKilled"))),
			wantFail: true, wantCode: 137, wantMsg: "OOMKilled",
		},
		{
			name: "legacy sidecar exited 0",
			pod:  legacyPod([]string{"main"}, statuses(terminated("main", 0, t0), failedWith(0, "", "Completed"))),
		},
		{
			name: "legacy sidecar running",
			pod:  legacyPod([]string{"main"}, statuses(running("main"), running(contract.SidecarContainerName))),
		},
		{
			name: "a failed workload container is not a sidecar failure",
			pod:  legacyPod([]string{"main"}, statuses(terminated("main", 1, t0), running(contract.SidecarContainerName))),
		},
		{
			name: "native sidecar restarted after a crash",
			pod: nativePod([]string{"main"}, func(p *corev1.Pod) {
				s := backOff(contract.SidecarContainerName, 2, t1)
				s.State = running(contract.SidecarContainerName).State
				s.LastTerminationState.Terminated.Message = "auth failed"
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{s}
			}),
			wantFail: true, wantCode: 2, wantMsg: "auth failed",
		},
		{
			name: "native sidecar status among regular statuses is not read",
			pod:  nativePod([]string{"main"}, statuses(failedWith(1, "x", "Error"))),
		},
		{
			name: "no status yet",
			pod:  legacyPod([]string{"main"}),
		},
		{
			name: "no sidecar",
			pod: func() *corev1.Pod {
				p := legacyPod([]string{"main"}, statuses(failedWith(1, "x", "Error")))
				p.Spec.Containers = p.Spec.Containers[1:]
				return p
			}(),
		},
	}
}

func TestSidecarFailure(t *testing.T) {
	for _, tc := range sidecarFailureCases() {
		t.Run(tc.name, func(t *testing.T) {
			failed, code, msg := SidecarFailure(tc.pod)
			if failed != tc.wantFail || code != tc.wantCode || msg != tc.wantMsg {
				t.Fatalf("SidecarFailure() = (%v, %d, %q), want (%v, %d, %q)",
					failed, code, msg, tc.wantFail, tc.wantCode, tc.wantMsg)
			}
		})
	}
}
