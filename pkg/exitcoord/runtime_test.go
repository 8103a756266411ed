package exitcoord

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/runtimewatch"
)

// watchRuntime puts a node-wide runtime watch in front of the env's fake runtime, as the node
// plugin does: the ExitCoordinator reads container states from it, and it calls ContainersChanged.
// version is what the fake runtime reports; events enables its event stream.
func (e *env) watchRuntime(pods podCache, version string, events bool) *runtimewatch.Watcher {
	e.t.Helper()
	e.rt.SetVersion("containerd", version)
	if events {
		e.rt.EnableEvents()
	}
	cri, err := containerexit.Dial(e.rt.Endpoint)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cri.Close() })
	w, err := runtimewatch.New(runtimewatch.Config{Client: cri, OnChange: e.l.ContainersChanged, Log: quiet,
		// A resync far in the future: with events, only the stream can be quick.
		ResyncInterval: time.Hour})
	if err != nil {
		e.t.Fatal(err)
	}
	e.l.Runtime, e.l.Pods = w, pods
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	for start := time.Now(); !w.Synced(); time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > testTimeout {
			e.t.Fatal("runtime watch never listed the runtime")
		}
	}
	return w
}

func withPolicy(p *corev1.Pod, policy corev1.RestartPolicy) *corev1.Pod {
	p.Spec.RestartPolicy = policy
	return p
}

// The moment the runtime shows the workload exited, the sidecar is told, in both modes and
// from both sources, with a reason that says where the news came from. The API has not
// reported anything yet (the pods have no status at all).
func TestRuntimeExitTellsTheSidecarAtOnce(t *testing.T) {
	for _, src := range []struct {
		name, version string
		events        bool
		want          string
	}{
		{"poll (containerd 1.6)", "1.6.20~ds1", false, runtimewatch.SourcePoll},
		{"events (containerd 2.x)", "v2.2.9", true, runtimewatch.SourceEvents},
	} {
		t.Run(src.name, func(t *testing.T) {
			e := newEnv(t)
			pods := podCache{
				"native": withPolicy(nativePod("native"), corev1.RestartPolicyNever),
				"legacy": withPolicy(legacyPod("legacy"), corev1.RestartPolicyOnFailure),
			}
			w := e.watchRuntime(pods, src.version, src.events)
			if w.Source() != src.want {
				t.Fatalf("source = %q, want %q", w.Source(), src.want)
			}
			e.mkEmptyDir("native")
			e.mkEmptyDir("legacy")
			e.rt.Set(ctr("native", "gcsfuse-sidecar", 0, running), ctr("native", "fetch", 0, exited), ctr("native", "main", 0, running),
				ctr("legacy", "gcsfuse-sidecar", 0, running), ctr("legacy", "app", 0, running))
			e.hold("native", holdFor, "main runs")
			e.hold("legacy", 0, "app runs")

			e.rt.SetState(id("native", "main", 0), exited, 3) // Never: any exit code is final
			e.rt.SetState(id("legacy", "app", 0), exited, 0)  // OnFailure: 0 is final
			for uid, rule := range map[types.UID]lifecycle.Rule{"native": lifecycle.RuleNeverAllTerminated, "legacy": lifecycle.RuleOnFailureAllSucceeded} {
				r, took := e.waitExit(uid, releaseBound)
				if r.Rule != string(rule) || !strings.Contains(r.Message, "container runtime") {
					t.Errorf("%s: exit file %+v, want rule %s and a reason naming the runtime", uid, r, rule)
				}
				t.Logf("%s released %s after the exit", uid, took)
			}
			// Later changes of the same pods (the sidecar's own exit, removal) ask nothing again.
			if err := removeExit(e, "native"); err != nil {
				t.Fatal(err)
			}
			e.rt.SetState(id("native", "gcsfuse-sidecar", 0), exited, 0)
			e.rt.Remove(id("native", "main", 0))
			e.hold("native", holdFor, "the pod was already released once")
		})
	}
}

// The sidecar stays while anything may still use the mounts: an OnFailure container that
// failed (it is restarted), restartPolicy Always, a second container still running, and a
// container the runtime has not created yet while the API shows it waiting.
func TestRuntimeExitKeepsTheSidecarWhileTheWorkloadMayRun(t *testing.T) {
	e := newEnv(t)
	twoApps := withPolicy(legacyPod("two"), corev1.RestartPolicyNever)
	twoApps.Spec.Containers = append(twoApps.Spec.Containers, corev1.Container{Name: "second"})
	notCreated := withPolicy(legacyPod("later"), corev1.RestartPolicyNever)
	notCreated.Spec.Containers = append(notCreated.Spec.Containers, corev1.Container{Name: "second"})
	notCreated.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "second", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	pods := podCache{
		"onfailure": withPolicy(legacyPod("onfailure"), corev1.RestartPolicyOnFailure),
		"always":    withPolicy(nativePod("always"), corev1.RestartPolicyAlways),
		"two":       twoApps,
		"later":     notCreated,
	}
	e.watchRuntime(pods, "v2.2.9", true)
	for uid := range pods {
		e.mkEmptyDir(uid)
	}
	failed := ctr("onfailure", "app", 0, exited)
	failed.ExitCode = 1
	e.rt.Set(failed, ctr("always", "main", 0, exited),
		ctr("two", "app", 0, exited), ctr("two", "second", 0, running), ctr("later", "app", 0, exited))
	for uid := range pods {
		e.hold(uid, holdFor/4, string(uid)+": its workload may still run")
	}
	// The failed container's restart exits 0: now nothing will run again.
	e.rt.Set(ctr("onfailure", "app", 1, exited))
	if r, _ := e.waitExit("onfailure", releaseBound); r.Rule != string(lifecycle.RuleOnFailureAllSucceeded) {
		t.Errorf("onfailure released with %+v", r)
	}
	e.rt.SetState(id("two", "second", 0), exited, 0)
	e.waitExit("two", releaseBound)
	e.hold("later", holdFor, "its second container was never created")
}

func removeExit(e *env, uid types.UID) error {
	return os.Remove(podfiles.At(e.emptyDir(uid)).ExitFile())
}

// A native pod whose mesh proxy (istio-proxy, a native sidecar of its own) still runs in
// the runtime when the app exits: the sidecar is not told to exit (the kubelet would
// restart it and never end the pod), and is once the proxy has stopped.
func TestRuntimeExitLeavesANativeSidecarBesideARunningProxy(t *testing.T) {
	e := newEnv(t)
	pods := podCache{"mesh": withPolicy(nativePod("mesh"), corev1.RestartPolicyNever)}
	e.watchRuntime(pods, "v2.2.9", true)
	e.mkEmptyDir("mesh")
	e.rt.Set(ctr("mesh", "gcsfuse-sidecar", 0, running), ctr("mesh", "istio-proxy", 0, running),
		ctr("mesh", "fetch", 0, exited), ctr("mesh", "main", 0, exited))
	e.hold("mesh", holdFor, "istio-proxy runs")
	e.rt.SetState(id("mesh", "istio-proxy", 0), exited, 0)
	if r, _ := e.waitExit("mesh", releaseBound); r.Rule != string(lifecycle.RuleNeverAllTerminated) {
		t.Errorf("released with %+v", r)
	}
}

// exitUnknownRuntime is a container runtime that lists a pod's containers but cannot give
// the exit code of an exited one (ContainerStatus fails, as for a container removed between
// the listing and the call) until known is called.
type exitUnknownRuntime struct {
	mu          sync.Mutex
	containers  []containerexit.Container
	code        int32
	codeKnown   bool
	statusCalls int
}

func (r *exitUnknownRuntime) PodContainers(_ context.Context, podUID string) ([]containerexit.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []containerexit.Container
	for _, c := range r.containers {
		if c.PodUID == podUID {
			out = append(out, c)
		}
	}
	return out, nil
}

func (r *exitUnknownRuntime) Status(_ context.Context, id string) (containerexit.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statusCalls++
	for _, c := range r.containers {
		if c.ID == id && r.codeKnown {
			c.ExitCode, c.ExitKnown, c.FinishedAt = r.code, true, time.Now()
			return c, nil
		}
	}
	return containerexit.Container{}, fmt.Errorf("container %q not found", id)
}

// known makes Status give code from now on.
func (r *exitUnknownRuntime) known(code int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.code, r.codeKnown = code, true
}

func (r *exitUnknownRuntime) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statusCalls
}

// TestRuntimeUnknownExitCodeKeepsTheSidecarUnderOnFailure guards the rule that a workload
// container the runtime shows exited, with an exit code it cannot give, is not done under
// restartPolicy OnFailure: the runtime view counts it as exit code -1 (lifecycle.UnknownExitCode), a
// failure, which the kubelet restarts. The sidecar is told only once the code is known to
// be 0.
func TestRuntimeUnknownExitCodeKeepsTheSidecarUnderOnFailure(t *testing.T) {
	e := newEnv(t)
	rt := &exitUnknownRuntime{containers: []containerexit.Container{
		{ID: "job-sidecar-0", PodUID: "job", Name: contract.SidecarContainerName, State: containerexit.StateRunning},
		{ID: "job-app-0", PodUID: "job", Name: "app", State: containerexit.StateExited}, // a listing: no exit code
	}}
	e.l.Runtime, e.l.Pods = rt, podCache{"job": withPolicy(legacyPod("job"), corev1.RestartPolicyOnFailure)}
	e.mkEmptyDir("job")

	e.l.ContainersChanged("job")
	if !idle(e.l, testTimeout) {
		t.Fatalf("the decision did not end within %s", testTimeout)
	}
	if rt.calls() == 0 {
		t.Fatal("the runtime was never asked for the app's exit code: the decision did not reach the rule")
	}
	if e.exitWritten("job") {
		r, _ := e.waitExit("job", 0)
		t.Fatalf("sidecar told to exit (rule %q: %s) although the app exited with an exit code the runtime could not give, "+
			"and restartPolicy OnFailure may restart it", r.Rule, r.Message)
	}

	// The runtime gives the code now: 0, nothing runs again.
	rt.known(0)
	e.l.ContainersChanged("job")
	if !idle(e.l, testTimeout) {
		t.Fatalf("the decision did not end within %s", testTimeout)
	}
	if !e.exitWritten("job") {
		t.Fatal("sidecar not told to exit once the app's exit code was known to be 0")
	}
	if r, _ := e.waitExit("job", 0); r.Rule != string(lifecycle.RuleOnFailureAllSucceeded) {
		t.Fatalf("released with rule %q, want %q", r.Rule, lifecycle.RuleOnFailureAllSucceeded)
	}
}

// The lifecycle rules see a runtime container as the runtime listed it: only an exited one
// is exited (created and unknown may still use the mounts), and its state keeps the
// runtime's words, which the follower's reasons quote.
func TestRuntimeContainerAsTheRulesSeeIt(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, s := range []containerexit.State{containerexit.StateCreated, containerexit.StateRunning, containerexit.StateExited, containerexit.StateUnknown} {
		c := containerexit.Container{ID: "id", PodUID: "p", Name: "app", Attempt: 2, State: s, CreatedAt: at,
			ExitCode: 3, ExitKnown: true, FinishedAt: at.Add(time.Second)}
		got := runtimeContainer(c)
		want := lifecycle.RuntimeContainer{Name: "app", ID: "id", Attempt: 2, State: s.String(), Exited: s == containerexit.StateExited,
			CreatedAt: at, ExitCode: 3, ExitKnown: true, FinishedAt: at.Add(time.Second)}
		if got != want {
			t.Errorf("runtimeContainer(%s) = %+v, want %+v", s, got, want)
		}
	}
}
