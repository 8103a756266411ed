package e2e

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// kubeletOutage is how long TestKubeletRestart keeps the kubelet stopped: longer than the
// apps that end during it take, shorter than the writers that span it.
const kubeletOutage = 10 * time.Second

// nodeSystemctl runs the node's systemctl stand-in (suite.NodeSystemctl) with args.
func nodeSystemctl(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", append([]string{suite.NodeSystemctl}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("systemctl %v on the node: %v\n%s", args, err, out)
	}
}

// terminalAt is when the kubelet marked p terminal: its Ready condition's last transition,
// which a terminal pod's kubelet sets with reason PodCompleted; the zero time without one.
func terminalAt(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Reason == "PodCompleted" {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// TestKubeletRestart: the node's kubelet stops (as `systemctl stop kubelet` does on a node,
// and the storage suites' disruptive tests do) while pods write, and while other pods' apps
// end, then starts again. In each mode (native, legacy, shared) both pods end Succeeded with
// every byte: the writer's sidecar or shared mount served through the outage, and the pod
// whose app ended while no kubelet looked is wound up when it is back. Measured: the kubelet
// back -> each pod terminal.
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
	type run struct {
		name, bucket, what string
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
		for _, w := range []struct {
			what  string
			bytes int
			delay string
		}{
			// Spans the outage: 32 chunks of 64 KiB, 700 ms apart (~22 s).
			{"writing", 2 * mib, "700ms"},
			// Ends during it: 3 chunks, 2.5 s apart (~7.5 s).
			{"exiting", 3 << 16, "2500ms"},
		} {
			r := run{podName(t, m.mode+"-"+w.what), newBucket(t), m.mode + " pod " + w.what, int64(w.bytes)}
			mode := m.mode
			if m.attrs != nil {
				mode = ""
			}
			createPod(t, r.name, podOpts{
				mode: mode, restart: corev1.RestartPolicyNever, attrs: m.attrs,
				volumes: []volume{{"bucket", r.bucket, mountPath}},
				args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(w.bytes), "-chunk-delay", w.delay},
			})
			runs = append(runs, r)
		}
	}
	for _, r := range runs {
		waitPod(t, r.name, 90*time.Second, "app started", func(p *corev1.Pod) bool {
			for _, c := range p.Status.ContainerStatuses {
				if c.Name == "app" && (c.State.Running != nil || c.State.Terminated != nil) {
					return true
				}
			}
			return false
		})
	}
	nodeSystemctl(t, "stop", "kubelet")
	t.Cleanup(func() { nodeSystemctl(t, "start", "kubelet") }) // idempotent
	stopped := time.Now()
	time.Sleep(kubeletOutage)
	nodeSystemctl(t, "start", "kubelet")
	back := time.Now()
	t.Logf("kubelet stopped for %s", back.Sub(stopped).Round(time.Millisecond))
	for _, r := range runs {
		p := waitPod(t, r.name, 180*time.Second, "terminal phase", terminal)
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s: pod %s, want Succeeded across the kubelet's restart\n%s\n%s", r.what, p.Status.Phase, describe(p), podEvents(r.name))
			continue
		}
		expectObject(t, r.bucket, "out.bin", r.bytes)
		if at := terminalAt(p); !at.IsZero() {
			t.Logf("timing %s: kubelet back -> pod terminal: %s", r.what, at.Sub(back).Round(time.Second))
		}
	}
	// The kubelet is back for good: the driver's own pods still run.
	np, err := cs.CoreV1().Pods("gcsfuse-csi").List(context.Background(), metav1.ListOptions{LabelSelector: "app=gcsfuse-csi-node"})
	if err != nil || len(np.Items) != 1 || np.Items[0].Status.Phase != corev1.PodRunning {
		t.Fatalf("node plugin after the kubelet's restart: %v %v", np, err)
	}
}
