package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// needNodes fails a test that needs n nodes on a cluster started with that many
// (suite.Nodes) but having fewer Ready, and skips it, saying why, on a cluster started with
// fewer: CI's two-node run (test/e2e/e2econfig) runs it.
func needNodes(t *testing.T, n int) []string {
	t.Helper()
	all := append([]string{primaryNode}, extraNodes...)
	if suite.Nodes < n {
		t.Skipf("needs %d nodes; this cluster was started with %d (NODES=%d hack/e2e.sh runs it)", n, max(suite.Nodes, 1), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ready := 0
	for _, name := range all {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node %s: %v", name, err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if ready < n {
		t.Fatalf("the cluster was started with %d nodes (E2E_NODES) and has %d Ready of %v, want %d", suite.Nodes, ready, all, n)
	}
	return all
}

// TestEveryNode: the driver serves each node of the cluster, not only the one the tests'
// other pods and the emulator run on. On every node, a Job of each mode (a native sidecar,
// a legacy one, the node's shared mounter) writes its object across the nodes' network to
// the emulator and completes with every byte, its volume published by that node's own plugin
// (its log names the pod); a pod that names no mode gets the mode its node's kubelet allows
// (with every node at one version here, that the webhook reads the selected node's kubelet
// rather than the oldest of the cluster is TestKubeClusterVersionsFollowThePodsSelection's).
func TestEveryNode(t *testing.T) {
	parallel(t)
	nodes := needNodes(t, 2)
	kubelets := map[string]*version.Version{}
	for _, name := range nodes {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := version.ParseGeneric(n.Status.NodeInfo.KubeletVersion)
		if err != nil {
			t.Fatalf("node %s: kubelet %q: %v", name, n.Status.NodeInfo.KubeletVersion, err)
		}
		kubelets[name] = v
	}
	for _, node := range nodes {
		t.Run(node, func(t *testing.T) {
			for _, mode := range []string{"auto", contract.ModeNative, contract.ModeLegacy, contract.MountModeShared} {
				t.Run(mode, func(t *testing.T) {
					t.Parallel()
					if mode == contract.ModeNative && !kubelets[node].AtLeast(nativeSidecarMinVersion) {
						t.Skipf("node %s runs kubelet %s: native sidecars need %s", node, kubelets[node], nativeSidecarMinVersion)
					}
					bucket := newBucket(t)
					name := podName(t, "")
					o := podOpts{restart: corev1.RestartPolicyNever, node: node,
						volumes: []volume{{"bucket", bucket, mountPath}},
						args:    []string{"write", "-dir", mountPath, "-name", "result.bin", "-bytes", strconv.Itoa(3 * mib)}}
					switch mode {
					case contract.MountModeShared:
						o.attrs = sharedAttrs
					case "auto":
					default:
						o.mode = mode
					}
					tr := track(t, metav1.ListOptions{LabelSelector: "job-name=" + name})
					defer tr.stop()
					createJob(t, name, o)
					cond, _ := waitJob(t, name, 120*time.Second)
					pod := jobPod(t, tr)
					p := waitPod(t, pod, 30*time.Second, "terminal", terminal)
					if cond != batchv1.JobComplete || p.Status.Phase != corev1.PodSucceeded {
						t.Fatalf("job %s, pod %s; want Complete, Succeeded\n%s\n%s", cond, p.Status.Phase, describe(p), podEvents(pod))
					}
					if p.Spec.NodeName != node {
						t.Fatalf("pod %s ran on %q, want %s", pod, p.Spec.NodeName, node)
					}
					expectObject(t, bucket, "result.bin", 3*mib)
					want := map[string]string{
						contract.ModeNative: contract.ModeNative, contract.ModeLegacy: contract.ModeLegacy, contract.MountModeShared: "",
						"auto": map[bool]string{true: contract.ModeNative, false: contract.ModeLegacy}[kubelets[node].AtLeast(nativeSidecarMinVersion)],
					}[mode]
					if got := p.Annotations[contract.AnnotationInjected]; got != want {
						t.Errorf("the webhook injected %q on node %s (kubelet %s), want %q", got, node, kubelets[node], want)
					}
					plugins, err := cs.CoreV1().Pods("gcsfuse-csi").List(context.Background(), onNodeSel("app=gcsfuse-csi-node", node))
					if err != nil || len(plugins.Items) != 1 {
						t.Fatalf("node plugin on %s: %v %v", node, plugins, err)
					}
					if l := podLog(t, plugins.Items[0].Name); !strings.Contains(l, ns+"/"+pod) {
						t.Errorf("the node plugin of %s (%s) never names pod %s/%s: another node's plugin published its volume?", node, plugins.Items[0].Name, ns, pod)
					}
				})
			}
		})
	}
}

// nodeRebootWithin bounds hack/'s reboot of a node (down whole, then up and Ready),
// pluginBackWithin the wait after it for the node's plugin to be Ready again, and
// podsBackWithin the wait for each pod to run and write again: all three stay under the
// 300 s after which the node's pods would be evicted had it been seen NotReady.
const (
	nodeRebootWithin = 2 * time.Minute
	pluginBackWithin = 90 * time.Second
	podsBackWithin   = 60 * time.Second
)

// rebootNode reboots hack/'s node index through the systemctl stand-in, in a process group
// of its own that a timeout kills whole (node-down.sh and node-up.sh with it).
func rebootNode(t *testing.T, node, index string) error {
	t.Helper()
	cmd := exec.Command("bash", suite.NodeSystemctl, "reboot")
	cmd.Env = append(os.Environ(), "GCSFUSE_CSI_NODE="+index)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("systemctl reboot of %s: %v\n%s", node, err, out.String())
		}
		return nil
	case <-time.After(nodeRebootWithin):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("systemctl reboot of %s did not end within %s\n%s", node, nodeRebootWithin, out.String())
	}
}

// nodeReady tells whether the node's Ready condition is True.
func nodeReady(name string) bool {
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestNodeReboot: a node goes down whole and comes back (`systemctl reboot` of hack/'s node:
// every process of the node stopped, its mounts, pod sandboxes and /run gone, its disk kept)
// under a Deployment of each mode writing to its bucket. When the node is back, its kubelet
// restarts each pod's containers, the driver (its plugin and shared mounter restarted with
// the node) mounts the volumes again and the apps write through them; once the Deployments
// are deleted, no volume mount is left on the node. Serial: it powers off the node that
// TestEveryNode uses.
func TestNodeReboot(t *testing.T) {
	needNodes(t, 2)
	if suite.NodeSystemctl == "" {
		t.Fatal("E2E_NODE_SYSTEMCTL is not set: hack/e2e.sh sets it to hack/node-systemctl.sh")
	}
	node, index := lastNode()
	type run struct{ mode, bucket, name string }
	var runs []run
	ctx := context.Background()
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy, contract.MountModeShared} {
		r := run{mode: mode, bucket: newBucket(t), name: podName(t, mode)}
		o := podOpts{restart: corev1.RestartPolicyAlways, node: node, grace: ptr(int64(10)),
			volumes: []volume{{"bucket", r.bucket, mountPath}},
			args:    []string{"loop", "-dir", mountPath, "-prefix", "part", "-bytes", strconv.Itoa(64 << 10), "-every", "500ms"}}
		if mode == contract.MountModeShared {
			o.attrs = sharedAttrs
		} else {
			o.mode = mode
		}
		ann, spec := podTemplate(o)
		labels := map[string]string{"app": r.name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: r.name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: spec},
			},
		}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.AppsV1().Deployments(ns).Delete(context.Background(), r.name, metav1.DeleteOptions{}) })
		runs = append(runs, r)
	}
	for _, r := range runs {
		waitObjects(t, r.bucket, "part", 2, 120*time.Second)
	}
	pods := map[string]corev1.Pod{} // the run's pod before the reboot
	for _, r := range runs {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + r.name})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("%s: pods %v %v", r.mode, list, err)
		}
		pods[r.name] = list.Items[0]
	}

	start := time.Now()
	// A failure half way must not leave the node down for the tests after this one.
	t.Cleanup(func() {
		if !nodeReady(node) {
			if err := rebootNode(t, node, index); err != nil {
				t.Errorf("bringing %s back after the test: %v", node, err)
			}
		}
	})
	if err := rebootNode(t, node, index); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	record(t, "node reboot -> node Ready", start, back)
	// The node's plugin restarted with it (the kubelet's mounts wait for it to register).
	waitfor.Until(t, pluginBackWithin, "the node plugin of "+node+" Ready after the reboot", func() bool {
		list, err := cs.CoreV1().Pods("gcsfuse-csi").List(ctx, onNodeSel("app=gcsfuse-csi-node", node))
		if err != nil || len(list.Items) != 1 {
			return false
		}
		for _, c := range list.Items[0].Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	record(t, "node Ready -> its node plugin Ready", back, time.Now())

	for _, r := range runs {
		before := pods[r.name]
		restarts := func(p *corev1.Pod) int32 {
			if st := containerStatus(p, appContainer); st != nil {
				return st.RestartCount
			}
			return -1
		}
		// The same pod (its node came back before it was evicted), its app a new container,
		// running, that wrote through the volume mounted again.
		if p, err := cs.CoreV1().Pods(ns).Get(ctx, before.Name, metav1.GetOptions{}); err != nil || p.UID != before.UID {
			t.Fatalf("%s: pod %s is gone after the reboot (evicted? %v)", r.mode, before.Name, err)
		}
		p := waitPod(t, before.Name, podsBackWithin, "app restarted and running", func(p *corev1.Pod) bool {
			st := containerStatus(p, appContainer)
			return st != nil && st.State.Running != nil && st.RestartCount > restarts(&before)
		})
		deadline := time.Now().Add(podsBackWithin)
		for !strings.Contains(logs(p.Name, appContainer), "wrote part-1 at") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: pod %s wrote nothing after the reboot in %s\n%s\napp log: %s\n%s", r.mode, p.Name, podsBackWithin, describe(p), logs(p.Name, appContainer), podEvents(p.Name))
			}
			time.Sleep(time.Second)
		}
		record(t, r.mode+": node Ready -> app writing again", back, time.Now())
	}

	for _, r := range runs {
		if err := cs.AppsV1().Deployments(ns).Delete(ctx, r.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		waitGone(t, pods[r.name].Name, 90*time.Second)
	}
	// No pod's CSI volume is still mounted on the node (the driver's own pods keep their
	// service account volumes): its mounts are its own (nodeinit -private), read through its
	// init's mount table.
	noVolumeMounts(t, node, "after its pods are gone")
}

// noVolumeMounts fails unless node has no pod's CSI volume mounted within 30 s.
func noVolumeMounts(t *testing.T, node, when string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := nodeMounts(t, node, "/volumes/kubernetes.io~csi/")
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume mounts left on %s %s:\n%s", node, when, strings.Join(left, "\n"))
		}
		time.Sleep(time.Second)
	}
}

// nodeMounts lists the mount points whose path contains part in hack/'s node's mount
// namespace (its nodeinit's, started with -hostname <node>).
func nodeMounts(t *testing.T, node, part string) []string {
	t.Helper()
	inits := testenv.ProcessPIDs(func(args []string) bool {
		return filepath.Base(args[0]) == "nodeinit" && slices.Contains(args, node)
	})
	if len(inits) != 1 {
		t.Fatalf("node %s: nodeinit processes %v, want 1", node, inits)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", inits[0]))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4], part) {
			found = append(found, f[4])
		}
	}
	return found
}

// TestNodeDrain's bounds: drainWithin bounds `kubectl drain` (its --timeout; the slowest
// evicted pod finishes its file inside its grace), drainGrace is the workload pods' grace,
// and drainedJobsWithin the wait for every Job to complete once the drain has ended (a
// replacement pod on the other node writes its file whole).
const (
	drainWithin       = 150 * time.Second
	drainGrace        = 60
	drainedJobsWithin = 120 * time.Second
	// drainFile is each Job's file: drainChunks 64 KiB chunks drainChunkDelay apart (~40 s,
	// inside drainGrace for the apps that finish it on SIGTERM), long enough that the drain
	// strikes in the middle of every write (the six start within seconds of each other).
	drainChunks, drainChunkDelay = 400, 100 * time.Millisecond
)

// TestNodeDrain: `kubectl drain` (the real kubectl, --ignore-daemonsets) of a node while Jobs
// of each mode (native, legacy, shared) write on it. Of each mode, one Job's app finishes
// its file on SIGTERM (its sidecar, or the shared mounter, keeps serving through the
// eviction's grace: its pod ends Succeeded there and the Job Complete), the other's app gives
// up at SIGTERM (its pod ends Failed with the eviction's DisruptionTarget condition, which
// the Job's podFailurePolicy ignores, and a replacement on the other node writes the file
// whole). The drain ends inside its timeout; the driver's node plugin and shared mounter are
// not evicted and not restarted (DaemonSets: the workload leaves first and they serve it to
// its end); every object is whole (size and MD5), the node is left with no volume mount.
// Serial: it cordons the node TestEveryNode uses.
func TestNodeDrain(t *testing.T) {
	needNodes(t, 2)
	if suite.Kubectl == "" {
		t.Fatal("E2E_KUBECTL is not set: hack/e2e.sh sets it to the cluster's kubectl")
	}
	node, _ := lastNode()
	ctx := context.Background()
	size := int64(drainChunks * 64 << 10)
	driverBefore := map[string]corev1.Pod{}
	for _, app := range []string{"gcsfuse-csi-node", "gcsfuse-csi-mounter"} {
		driverBefore[app] = driverPodOn(t, app, node)
	}

	type run struct {
		mode, name, bucket string
		finish             bool // the app finishes its file on SIGTERM
		tr                 *tracker
	}
	var runs []*run
	// A failure half way must not leave the node cordoned, nor Jobs writing, for the tests
	// after this one.
	t.Cleanup(func() { deleteJobs(t, metav1.ListOptions{LabelSelector: "drain=1"}) })
	t.Cleanup(func() {
		if err := uncordon(node); err != nil {
			t.Errorf("%v", err)
		}
	})
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy, contract.MountModeShared} {
		if mode == contract.ModeNative && !nativeOK {
			continue
		}
		for _, finish := range []bool{true, false} {
			r := &run{mode: mode, finish: finish, bucket: newBucket(t), name: podName(t, mode+map[bool]string{true: "-finish", false: "-abort"}[finish])}
			args := []string{"write", "-dir", mountPath, "-name", "out.bin", "-marker", "writer-started",
				"-bytes", strconv.FormatInt(size, 10), "-chunk-delay", drainChunkDelay.String()}
			if finish {
				args = append(args, "-finish-on-term")
			}
			o := podOpts{restart: corev1.RestartPolicyNever, grace: ptr(int64(drainGrace)),
				volumes: []volume{{"bucket", r.bucket, mountPath}}, args: args}
			if mode == contract.MountModeShared {
				o.attrs = sharedAttrs
			} else {
				o.mode = mode
			}
			r.tr = track(t, metav1.ListOptions{LabelSelector: "job-name=" + r.name})
			if _, err := cs.BatchV1().Jobs(ns).Create(ctx, preferringJob(r.name, node, map[string]string{"drain": "1"}, 0, o), metav1.CreateOptions{}); err != nil {
				t.Fatalf("create job %s: %v", r.name, err)
			}
			runs = append(runs, r)
		}
	}
	for _, r := range runs {
		waitObjects(t, r.bucket, "writer", 1, 120*time.Second)
	}
	// Every first pod ran on the node drained (the Jobs prefer it): else the test proves
	// nothing of the drain.
	first := map[string]string{}
	for _, r := range runs {
		pods := r.tr.podNames()
		if len(pods) != 1 {
			t.Fatalf("%s: pods %v before the drain, want 1", r.name, pods)
		}
		// Its app has written its marker; its status says so once the kubelet has looked
		// (up to a relist, and the status manager's sync, later). Still writing: else the
		// drain would not strike mid-write, and the case would not test what it says (the
		// pods started too far apart on a loaded node?).
		p := waitPod(t, pods[0], 30*time.Second, "app seen running or ended", func(p *corev1.Pod) bool {
			st := containerStatus(p, appContainer)
			return st != nil && (st.State.Running != nil || st.State.Terminated != nil)
		})
		if p.Spec.NodeName != node {
			t.Fatalf("%s: its pod %s runs on %q, want %s", r.name, p.Name, p.Spec.NodeName, node)
		}
		if st := containerStatus(p, appContainer); st.State.Running == nil {
			t.Fatalf("%s: its pod %s's app ended before the drain (%+v): the drain would not strike mid-write", r.name, p.Name, st.State)
		}
		want := map[string]string{contract.ModeNative: contract.ModeNative, contract.ModeLegacy: contract.ModeLegacy, contract.MountModeShared: ""}[r.mode]
		if got := p.Annotations[contract.AnnotationInjected]; got != want {
			t.Fatalf("%s: the webhook injected %q, want %q", r.name, got, want)
		}
		first[r.name] = p.Name
	}

	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, drainWithin+30*time.Second)
	defer cancel()
	out, err := drain(dctx, node, "--timeout="+drainWithin.String())
	if err != nil {
		t.Fatal(err)
	}
	drained := time.Now()
	record(t, fmt.Sprintf("kubectl drain of a node with %d writing Jobs", len(runs)), start, drained)
	t.Logf("kubectl drain:\n%s", out)

	for _, r := range runs {
		cond, _ := waitJob(t, r.name, drainedJobsWithin)
		if cond != batchv1.JobComplete {
			t.Errorf("%s: job %s after the drain, want Complete\n%s", r.name, cond, r.tr.summary())
			continue
		}
		expectObject(t, r.bucket, "out.bin", size)
		p := r.tr.final(first[r.name]) // evicted: deleted
		if p == nil {
			t.Errorf("%s: its first pod %s was never seen deleted (evicted)", r.name, first[r.name])
			continue
		}
		disrupted := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
		})
		switch {
		case !disrupted:
			t.Errorf("%s: its pod %s on %s has no DisruptionTarget condition: was it evicted?\n%s", r.name, p.Name, node, describe(p))
		case r.finish && p.Status.Phase != corev1.PodSucceeded:
			// The app finished its file through the eviction's grace: its volume served it.
			t.Errorf("%s: evicted pod %s %s, want Succeeded (the app finishes its file on SIGTERM)\n%s\napp log: %s", r.name, p.Name, p.Status.Phase, describe(p), logs(p.Name, appContainer))
		case !r.finish && p.Status.Phase != corev1.PodFailed:
			t.Errorf("%s: evicted pod %s %s, want Failed (the app gives up at SIGTERM)\n%s", r.name, p.Name, p.Status.Phase, describe(p))
		case !r.finish:
			// The Job replaced it on the other node, where a pod wrote the file whole.
			var elsewhere []string
			for _, name := range r.tr.podNames() {
				if q := r.tr.last(name); name != p.Name && q != nil && q.Spec.NodeName != node && q.Status.Phase == corev1.PodSucceeded {
					elsewhere = append(elsewhere, name)
				}
			}
			if len(elsewhere) != 1 {
				t.Errorf("%s: pods Succeeded off %s after the drain: %v, want 1\n%s", r.name, node, elsewhere, r.tr.summary())
			}
		}
		// A sidecar's container ended 0: it neither lost nor cut the app's writes.
		if st := containerStatus(p, contract.SidecarContainerName); r.mode != contract.MountModeShared && (st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode != 0) {
			t.Errorf("%s: pod %s's sidecar %+v, want exited 0", r.name, p.Name, st)
		}
	}

	// The driver's pods of the node were neither evicted nor restarted.
	for app, before := range driverBefore {
		after := driverPodOn(t, app, node)
		if after.UID != before.UID || after.DeletionTimestamp != nil || restarts(after) != restarts(before) {
			t.Errorf("%s on %s: pod %s (uid %s, restarts %d, deleting %v) after the drain, was %s (uid %s, restarts %d): the drain reached the driver",
				app, node, after.Name, after.UID, restarts(after), after.DeletionTimestamp != nil, before.Name, before.UID, restarts(before))
		}
	}
	noVolumeMounts(t, node, "after the drain")
}
