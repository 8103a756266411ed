package lifecycle

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func runtimeRunning(name, id string, attempt uint32, created time.Time) RuntimeContainer {
	return RuntimeContainer{Name: name, ID: id, Attempt: attempt, State: "running", CreatedAt: created}
}

func runtimeExited(name, id string, attempt uint32, code int32, finished time.Time) RuntimeContainer {
	return RuntimeContainer{Name: name, ID: id, Attempt: attempt, State: "exited", Exited: true, CreatedAt: t0,
		ExitCode: code, ExitKnown: true, FinishedAt: finished}
}

func TestLatestAttempts(t *testing.T) {
	tests := []struct {
		name string
		cs   []RuntimeContainer
		want map[string]string // name -> ID
	}{
		{"none", nil, map[string]string{}},
		{"one per name", []RuntimeContainer{runtimeRunning("a", "a0", 0, t0), runtimeRunning("b", "b0", 0, t0)},
			map[string]string{"a": "a0", "b": "b0"}},
		{"the highest attempt, in any order", []RuntimeContainer{runtimeRunning("a", "a2", 2, t0), runtimeExited("a", "a1", 1, 1, t1), runtimeRunning("a", "a0", 0, t2)},
			map[string]string{"a": "a2"}},
		{"attempts tie: the latest created", []RuntimeContainer{runtimeRunning("a", "early", 1, t0), runtimeRunning("a", "late", 1, t1)},
			map[string]string{"a": "late"}},
		{"attempts and creation tie: the first listed", []RuntimeContainer{runtimeRunning("a", "first", 1, t1), runtimeRunning("a", "second", 1, t1)},
			map[string]string{"a": "first"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			for name, c := range LatestAttempts(tt.cs) {
				got[name] = c.ID
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("LatestAttempts = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRuntimeViewContainers(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	proxy := func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "proxy", RestartPolicy: &always})
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"legacy: the workload, not the sidecar, ignored or init containers",
			legacyPod([]string{"a", "mesh", "b"}, initContainers("setup"), annotate(contract.AnnotationIgnoreContainers, "mesh")), []string{"a", "b"}},
		{"native: the workload, then the other native sidecars; not regular init containers",
			nativePod([]string{"a"}, initContainers("setup"), proxy), []string{"a", "proxy"}},
		{"no sidecar: the regular containers", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RuntimeViewContainers(tt.pod); !slices.Equal(got, tt.want) {
				t.Fatalf("RuntimeViewContainers = %q, want %q", got, tt.want)
			}
		})
	}
}

// viewState is what a status became in a runtime view: its state in words, exit code,
// start or finish time, ID, restarts and last termination.
type viewState struct {
	state    string
	code     int32
	at       time.Time
	id       string
	restarts int32
	last     string // the last termination state's exit code, "" without one
}

func (s viewState) String() string {
	return fmt.Sprintf("%s code %d at %s id %q restarts %d last %q", s.state, s.code, s.at.Format(time.TimeOnly), s.id, s.restarts, s.last)
}

func TestWithRuntimeStates(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	sc := contract.SidecarContainerName
	withInit := func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "setup"}, corev1.Container{Name: "proxy", RestartPolicy: &always})
	}
	describe := func(st corev1.ContainerStatus) viewState {
		s := viewState{id: st.ContainerID, restarts: st.RestartCount}
		switch {
		case st.State.Terminated != nil:
			s.state, s.code, s.at = "terminated", st.State.Terminated.ExitCode, st.State.Terminated.FinishedAt.Time
		case st.State.Running != nil:
			s.state, s.at = "running", st.State.Running.StartedAt.Time
		case st.State.Waiting != nil:
			s.state = "waiting"
		}
		if lt := st.LastTerminationState.Terminated; lt != nil {
			s.last = fmt.Sprint(lt.ExitCode)
		}
		return s
	}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		latest []RuntimeContainer
		// want: name -> state, for regular (want) and init (wantInit) statuses, in order
		want, wantInit []string
		check          map[string]viewState
	}{
		{
			name:   "an exit the API has not seen: terminated with the runtime's code and time",
			pod:    legacyPod([]string{"app"}, statuses(running("app"), running(sc))),
			latest: []RuntimeContainer{runtimeExited("app", "app1", 1, 3, t2), runtimeRunning(sc, "sc0", 0, t0)},
			want:   []string{"app", sc},
			check: map[string]viewState{
				"app": {state: "terminated", code: 3, at: t2, id: "cri://app1", restarts: 1},
				sc:    {state: "running", at: t0},
			},
		},
		{
			name:   "a running container: running since its creation",
			pod:    legacyPod([]string{"app"}, statuses(creating("app"))),
			latest: []RuntimeContainer{runtimeRunning("app", "app0", 0, t1)},
			want:   []string{"app"},
			check:  map[string]viewState{"app": {state: "running", at: t1, id: "cri://app0"}},
		},
		{
			name:   "created or unknown counts as running",
			pod:    legacyPod([]string{"app", "b"}),
			latest: []RuntimeContainer{{Name: "app", ID: "app0", State: "created", CreatedAt: t1}, {Name: "b", ID: "b0", State: "unknown", CreatedAt: t2}},
			want:   []string{"app", "b"},
			check:  map[string]viewState{"app": {state: "running", at: t1, id: "cri://app0"}, "b": {state: "running", at: t2, id: "cri://b0"}},
		},
		{
			name:   "not in the runtime: the API's status stays",
			pod:    legacyPod([]string{"app", "b"}, statuses(creating("app"), terminated("b", 0, t1))),
			latest: []RuntimeContainer{runtimeRunning(sc, "sc0", 0, t0)},
			want:   []string{"app", "b"},
			check:  map[string]viewState{"app": {state: "waiting"}, "b": {state: "terminated", at: t1}},
		},
		{
			name:   "no API status yet: one is added, after the others",
			pod:    legacyPod([]string{"app", "b"}, statuses(running(sc))),
			latest: []RuntimeContainer{runtimeExited("b", "b0", 0, 0, t1), runtimeRunning("app", "app0", 0, t0)},
			want:   []string{sc, "app", "b"},
			check:  map[string]viewState{"app": {state: "running", at: t0, id: "cri://app0"}, "b": {state: "terminated", at: t1, id: "cri://b0"}},
		},
		{
			name:   "the API's last termination state is kept",
			pod:    legacyPod([]string{"app"}, restart(corev1.RestartPolicyOnFailure), statuses(backOff("app", 1, t0))),
			latest: []RuntimeContainer{runtimeRunning("app", "app1", 1, t1)},
			want:   []string{"app"},
			check:  map[string]viewState{"app": {state: "running", at: t1, id: "cri://app1", restarts: 1, last: "1"}},
		},
		{
			name:   "an unknown exit code as the caller gives it",
			pod:    legacyPod([]string{"app"}, restart(corev1.RestartPolicyOnFailure)),
			latest: []RuntimeContainer{{Name: "app", ID: "app0", State: "exited", Exited: true, ExitCode: UnknownExitCode, FinishedAt: t1}},
			want:   []string{"app"},
			check:  map[string]viewState{"app": {state: "terminated", code: UnknownExitCode, at: t1, id: "cri://app0"}},
		},
		{
			name: "the sidecar, ignored and regular init containers keep the API's status; other native sidecars do not",
			pod: nativePod([]string{"app", "mesh"}, withInit, annotate(contract.AnnotationIgnoreContainers, "mesh"),
				statuses(running("app"), running("mesh")), initStatuses(running(sc), running("setup"), running("proxy"))),
			latest: []RuntimeContainer{runtimeExited("app", "app0", 0, 0, t1), runtimeExited("mesh", "m0", 0, 0, t1),
				runtimeExited(sc, "sc0", 0, 0, t1), runtimeExited("setup", "s0", 0, 0, t1), runtimeExited("proxy", "p0", 0, 0, t2)},
			want:     []string{"app", "mesh"},
			wantInit: []string{sc, "setup", "proxy"},
			check: map[string]viewState{
				"app": {state: "terminated", at: t1, id: "cri://app0"}, "mesh": {state: "running", at: t0},
				sc: {state: "running", at: t0}, "setup": {state: "running", at: t0}, "proxy": {state: "terminated", at: t2, id: "cri://p0"},
			},
		},
		{
			name:     "legacy: native-looking init containers are not taken from the runtime",
			pod:      legacyPod([]string{"app"}, withInit, initStatuses(running("proxy"))),
			latest:   []RuntimeContainer{runtimeExited("proxy", "p0", 0, 0, t2)},
			want:     nil,
			wantInit: []string{"proxy"},
			check:    map[string]viewState{"proxy": {state: "running", at: t0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			view := WithRuntimeStates(tt.pod, LatestAttempts(tt.latest))
			if !equalPods(before, tt.pod) {
				t.Fatal("WithRuntimeStates modified the pod")
			}
			names := func(sts []corev1.ContainerStatus) []string {
				var out []string
				for _, st := range sts {
					out = append(out, st.Name)
				}
				return out
			}
			if got := names(view.Status.ContainerStatuses); !slices.Equal(got, tt.want) {
				t.Fatalf("container statuses %q, want %q", got, tt.want)
			}
			if got := names(view.Status.InitContainerStatuses); !slices.Equal(got, tt.wantInit) {
				t.Fatalf("init container statuses %q, want %q", got, tt.wantInit)
			}
			for _, st := range append(view.Status.ContainerStatuses, view.Status.InitContainerStatuses...) {
				want, ok := tt.check[st.Name]
				if !ok {
					continue
				}
				got := describe(st)
				if got.state != want.state || got.code != want.code || !got.at.Equal(want.at) || got.id != want.id ||
					got.restarts != want.restarts || got.last != want.last {
					t.Errorf("%s: %s, want %s", st.Name, got, want)
				}
			}
		})
	}
}
