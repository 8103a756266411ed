package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestKubeletRestart's timing: the writers span the outage, the other apps end inside it.
// The apps start one by one on a loaded node, so each case allows a stagger of its start:
// exitingFor > the stagger, and exitingFor < the stagger + kubeletOutage.
const (
	kubeletOutage = 20 * time.Second
	// exitingChunks x exitingDelay: the apps that end during the outage (~12 s).
	exitingChunks, exitingDelay = 4, 3 * time.Second
	// writingChunks x writingDelay: the apps that write across it (~40 s).
	writingChunks, writingDelay = 40, time.Second
	// nodeBackWithin bounds the wait for the node to be Ready again after the kubelet starts.
	nodeBackWithin = 2 * time.Minute
)

// nodeSystemctl runs `systemctl VERB kubelet` through the stand-in (suite.NodeSystemctl) of
// hack/'s node index.
func nodeSystemctl(t *testing.T, verb, index string) error {
	t.Helper()
	// The stand-in waits up to 3 minutes for the node's lock (a reboot), then stops (30 s)
	// and starts.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	return systemctl(ctx, index, verb, "kubelet")
}

// lastNode is the node a test that stops a node's parts runs on: the cluster's last (on two
// nodes, one of its own, its pods pinned there with podOpts.node), and hack/'s index of it.
func lastNode() (name, index string) {
	if len(extraNodes) == 0 {
		return primaryNode, "1"
	}
	name = extraNodes[len(extraNodes)-1]
	return name, strings.TrimPrefix(name, primaryNode+"-") // hack/'s node N is <node 1>-N
}

// nodesReady waits until every node is Ready.
func nodesReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		ready := err == nil && len(nodes.Items) > 0
		for _, n := range nodes.Items {
			ok := false
			for _, c := range n.Status.Conditions {
				ok = ok || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
			}
			ready = ready && ok
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes not Ready %s after the kubelet started (last error: %v)", within, err)
		}
		time.Sleep(time.Second)
	}
}

// TestKubeletRestart: the node's kubelet stops (as `systemctl stop kubelet` does on a node,
// and the storage suites' disruptive tests do) while pods write, and while other pods' apps
// end, then starts again. In each mode (native, legacy, shared) both pods end Succeeded with
// every byte and a sidecar that exited 0 (the shared mounter not restarted): the writer's
// mount served through the outage, and the pod whose app ended while no kubelet looked is
// wound up when it is back; the native and legacy sidecars of those pods ended during the
// outage, told by the node plugin from the runtime, not by the kubelet. Measured: the kubelet
// back -> each pod seen terminal. On a cluster of two nodes (CI's polling run) it stops the
// second's kubelet, the pods pinned there; else the one node's. Serial.
func TestKubeletRestart(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("stops the kubelet")
	}
	if suite.NodeSystemctl == "" {
		if suite.Require {
			t.Fatal("E2E_NODE_SYSTEMCTL is not set: hack/e2e.sh sets it to hack/node-systemctl.sh")
		}
		t.Skip("E2E_NODE_SYSTEMCTL is not set: no way to stop the node's kubelet")
	}
	node, index := lastNode()
	pinned := ""
	if node != primaryNode {
		pinned = node
	}
	type run struct {
		name, bucket, mode string
		exiting            bool
		bytes              int64
	}
	var runs []run
	for _, m := range []struct {
		mode  string
		attrs map[string]string
	}{{contract.ModeNative, nil}, {contract.ModeLegacy, nil}, {"shared", sharedAttrs}} {
		if m.mode == contract.ModeNative && !nativeOK {
			continue
		}
		for _, exiting := range []bool{false, true} {
			chunks, delay, what := writingChunks, writingDelay, "writing"
			if exiting {
				chunks, delay, what = exitingChunks, exitingDelay, "exiting"
			}
			r := run{podName(t, m.mode+"-"+what), newBucket(t), m.mode, exiting, int64(chunks) << 16}
			mode := m.mode
			if m.attrs != nil {
				mode = ""
			}
			createPod(t, r.name, podOpts{
				mode: mode, restart: corev1.RestartPolicyNever, attrs: m.attrs, node: pinned,
				volumes: []volume{{"bucket", r.bucket, mountPath}},
				args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.FormatInt(r.bytes, 10), "-chunk-delay", delay.String()},
			})
			runs = append(runs, r)
		}
	}
	get := func(name string) *corev1.Pod {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		return p
	}
	// Every app running at once, looked at together (not one by one: an app seen late may
	// have ended).
	deadline := time.Now().Add(90 * time.Second)
	for running := 0; running < len(runs); {
		running = 0
		for _, r := range runs {
			if st := containerStatus(get(r.name), "app"); st != nil && st.State.Running != nil {
				running++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d apps running after 90 s", running, len(runs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	mounterBefore := driverPodOn(t, "gcsfuse-csi-mounter", node)
	// Started again whatever happens from here (idempotent), and the node Ready before the
	// next test: a kubelet left stopped would fail every test after this one.
	t.Cleanup(func() {
		if err := nodeSystemctl(t, "start", index); err != nil {
			t.Errorf("%v", err)
		}
		if err := nodesReady(nodeBackWithin); err != nil {
			t.Errorf("%v", err)
		}
	})
	if err := nodeSystemctl(t, "stop", index); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	time.Sleep(kubeletOutage)
	if err := nodeSystemctl(t, "start", index); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	t.Logf("kubelet stopped for %s", back.Sub(stopped).Round(time.Millisecond))

	seen := map[string]time.Time{} // pod -> first seen terminal
	deadline = time.Now().Add(3 * time.Minute)
	for len(seen) < len(runs) && time.Now().Before(deadline) {
		for _, r := range runs {
			if _, ok := seen[r.name]; !ok && terminal(get(r.name)) {
				seen[r.name] = time.Now()
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Container times have a second's resolution.
	during := func(at time.Time) bool { return !at.Before(stopped.Truncate(time.Second)) && !at.After(back) }
	for _, r := range runs {
		p := get(r.name)
		what := r.mode + map[bool]string{false: " pod writing", true: " pod exiting"}[r.exiting]
		if !terminal(p) {
			t.Errorf("%s: not terminal 3 minutes after the kubelet was back\n%s\n%s", what, describe(p), podEvents(r.name))
			continue
		}
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s: pod %s, want Succeeded across the kubelet's restart\n%s\n%s", what, p.Status.Phase, describe(p), podEvents(r.name))
			continue
		}
		expectObject(t, r.bucket, "out.bin", r.bytes)
		app := containerStatus(p, "app").State.Terminated
		if r.exiting != during(app.FinishedAt.Time) {
			t.Errorf("%s: the app ended at %s, the kubelet was away %s to %s: the case did not test what it says (the node too slow to start its pods together?)",
				what, app.FinishedAt.Format(time.TimeOnly), stopped.Format(time.TimeOnly), back.Format(time.TimeOnly))
		}
		if r.mode != "shared" {
			sc := containerStatus(p, contract.SidecarContainerName)
			if sc == nil || sc.State.Terminated == nil || sc.State.Terminated.ExitCode != 0 || sc.RestartCount != 0 {
				t.Errorf("%s: sidecar %+v, want exited 0 and never restarted", what, sc)
			} else if r.exiting && !during(sc.State.Terminated.FinishedAt.Time) {
				t.Errorf("%s: the sidecar ended at %s, want during the outage (the node plugin tells it from the runtime, without the kubelet)",
					what, sc.State.Terminated.FinishedAt.Format(time.TimeOnly))
			}
		}
		t.Logf("timing %s: kubelet back -> pod seen terminal: %s", what, seen[r.name].Sub(back).Round(100*time.Millisecond))
	}
	if after := driverPodOn(t, "gcsfuse-csi-mounter", node); after.UID != mounterBefore.UID || restarts(after) != restarts(mounterBefore) {
		t.Errorf("the shared mounter was replaced or restarted across the kubelet's restart")
	}
}

// restarts sums a pod's container restarts.
func restarts(p corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}
