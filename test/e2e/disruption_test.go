package e2e

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// partFiles counts the complete loop files ("<prefix>-N" of size bytes) in the bucket and
// fails on any incomplete one: the loop writer always finishes the file it is writing.
func partFiles(t *testing.T, bucket, prefix string, size int64) int {
	t.Helper()
	n := 0
	for name, o := range objects(t, bucket) {
		if !strings.HasPrefix(name, prefix+"-") {
			continue
		}
		if o.Size != strconv.FormatInt(size, 10) {
			t.Errorf("object %s is %s bytes, want %d: a write was cut", name, o.Size, size)
		}
		n++
	}
	return n
}

// waitObjects waits until the bucket holds at least n objects with the prefix.
func waitObjects(t *testing.T, bucket, prefix string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c := 0
		for name := range objects(t, bucket) {
			if strings.HasPrefix(name, prefix+"-") {
				c++
			}
		}
		if c >= n {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("bucket %s: fewer than %d %s-* objects after %s (has %v)", bucket, n, prefix, d, names(objects(t, bucket)))
}

// TestDeploymentScaleDown: a Deployment's pod is writing when it is scaled to zero. The app
// gets SIGTERM, finishes its file and exits; the sidecar must keep serving until then, and
// then end promptly instead of holding the pod for the whole grace period.
func TestDeploymentScaleDown(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		const size = 256 << 10
		ann, spec := podTemplate(podOpts{
			mode: mode, restart: corev1.RestartPolicyAlways, grace: ptr(int64(30)),
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"loop", "-dir", mountPath, "-prefix", "part", "-bytes", strconv.Itoa(size), "-every", "300ms"},
		})
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: spec},
			},
		}
		ctx := context.Background()
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr := track(t, metav1.ListOptions{LabelSelector: "app=" + name})
		waitObjects(t, bucket, "part", 3, 120*time.Second)
		pods := tr.podNames()
		if len(pods) != 1 {
			t.Fatalf("deployment pods %v, want 1", pods)
		}
		pod := pods[0]
		scaled := time.Now()
		if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, pod, 60*time.Second)
		gone := time.Now()
		n := partFiles(t, bucket, "part", size)
		if n < 3 {
			t.Fatalf("only %d complete files in the bucket", n)
		}
		record(t, "scale to 0 -> pod gone", scaled, gone)
		checkDeletion(t, mode, tr, pod, scaled, gone, 30)
	})
}

// heldMargin tells a sidecar that ended by itself from one held to the grace period's end,
// which ends at the deletion plus the grace or later: the kubelet's finish times have 1 s
// precision, and this leaves 2 s more.
const heldMargin = 3 * time.Second

// checkDeletion asserts how a deleted pod's sidecar ended. The app exits about 1 s after
// SIGTERM. A native sidecar is stopped by the kubelet right after it; a legacy sidecar is
// told by the node plugin, which follows the deleted pod's workload containers in the
// container runtime (the kubelet publishes no container status while it stops a pod). Either
// way the sidecar must have ended by itself, well before the grace period's end: that is the
// outcome judged, not how long the pod took to go away, which on a loaded node is mostly the
// kubelet's own pace (CI's run of 3f648b7: a sidecar ended 13 s after the delete, the pod was
// gone at 29.9 s). deleted is when the deletion was asked for (or the scale-down that led to
// it), gone when the pod was seen gone.
//
// It fails unless the last status the tracker saw of the deleted pod shows the sidecar exited
// 0 more than heldMargin before the grace period's end (counted from deleted: the kubelet sees
// the deletion after it, so a sidecar held to its drain deadline ends later still). A sidecar
// the kubelet SIGKILLed (137) fails, and so does one that exited 0 at its deadline (it drains
// to exactly the kubelet's kill, pkg/lifecycle/sidecarrule). When no status showed the
// sidecar terminated (the kubelet may delete the pod right after its last status), the time
// the pod took to go away decides instead: held to the grace's end would be the grace, and two
// thirds of it still tells the two apart.
func checkDeletion(t *testing.T, mode string, tr *tracker, pod string, deleted, gone time.Time, grace int) {
	t.Helper()
	t.Logf("pod gone after %s", gone.Sub(deleted).Round(time.Millisecond))
	last := tr.final(pod)
	if last == nil {
		last = tr.last(pod)
	}
	code := int32(-1)
	if last != nil {
		code = sidecarExitCode(last)
	}
	end := deleted.Add(time.Duration(grace) * time.Second)
	switch took := gone.Sub(deleted); {
	case code == 0:
		finished := containerStatus(last, contract.SidecarContainerName).State.Terminated.FinishedAt.Time
		t.Logf("the %s sidecar exited 0 %s after the deletion (1 s precision)", mode, finished.Sub(deleted).Round(time.Second))
		if !finished.Before(end.Add(-heldMargin)) {
			t.Fatalf("the %s sidecar exited 0 at %s, %s after the deletion of a %d s grace period: held to its end\n%s",
				mode, finished.UTC().Format(time.TimeOnly), finished.Sub(deleted).Round(time.Second), grace, describe(last))
		}
	case code != -1:
		t.Fatalf("sidecar exit code %d, want 0 (137 means the kubelet had to SIGKILL it at the end of the grace period)\n%s", code, describe(last))
	case took > time.Duration(grace)*time.Second*2/3:
		t.Fatalf("pod took %s to go away (grace period %d s) and no status showed its sidecar ended: the %s sidecar held it", took.Round(time.Millisecond), grace, mode)
	default:
		t.Logf("no status showed the sidecar ended; the pod was gone after %s of a %d s grace period", took.Round(time.Millisecond), grace)
	}
}

// waitGone waits until the pod no longer exists.
func waitGone(t *testing.T, pod string, d time.Duration) {
	t.Helper()
	waitGoneIn(t, ns, pod, d)
}

// waitGoneIn is waitGone for a pod in namespace.
func waitGoneIn(t *testing.T, namespace, pod string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, err := cs.CoreV1().Pods(namespace).Get(context.Background(), pod, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	p, _ := cs.CoreV1().Pods(namespace).Get(context.Background(), pod, metav1.GetOptions{})
	t.Fatalf("pod %s/%s still exists after %s:\n%s\n%s", namespace, pod, d, describe(p), podEventsIn(namespace, pod))
}

// TestDeleteWhileWriting: the pod is deleted while the app is writing a file slowly; the app
// finishes the file within its grace period. The object must be complete: the sidecar keeps
// gcsfuse serving until the app has exited (legacy: until the exit file; native: the kubelet
// stops it after the app).
func TestDeleteWhileWriting(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		const size = 4 * mib
		// 64 chunks of 64 KiB, 100 ms apart: ~6.4 s of writing.
		tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(30)),
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"write", "-dir", mountPath, "-name", "slow.bin", "-bytes", strconv.Itoa(size), "-chunk-delay", "100ms", "-finish-on-term"},
		})
		waitPod(t, name, startWithin, "running", func(p *corev1.Pod) bool {
			st := containerStatus(p, appContainer)
			return st != nil && st.State.Running != nil
		})
		time.Sleep(2 * time.Second) // mid-file
		deleted, gone := deletePod(t, name, nil, 60*time.Second)
		expectObject(t, bucket, "slow.bin", size)
		record(t, "delete -> pod gone (app needs ~4 s more)", deleted, gone)
		checkDeletion(t, mode, tr, name, deleted, gone, 30)
	})
}

// TestTwoVolumes: two buckets in one pod, written by two containers that end at different
// times. Both objects must be complete and the pod must succeed: the sidecar ends only
// after the last container.
func TestTwoVolumes(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		b1, b2 := newBucket(t), newBucket(t)
		name := podName(t, "")
		vols := []volume{{"first", b1, "/first"}, {"second", b2, "/second"}}
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, volumes: vols,
			args: []string{"write", "-dir", "/first", "-name", "a.bin", "-bytes", strconv.Itoa(mib)},
			extra: []corev1.Container{workloadContainer("late-writer", vols,
				"write", "-dir", "/second", "-name", "b.bin", "-bytes", strconv.Itoa(mib), "-chunk-delay", "50ms")},
		})
		tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		waitSucceeded(t, name)
		expectObject(t, b1, "a.bin", mib)
		expectObject(t, b2, "b.bin", mib)
		record(t, "last app exit -> pod Succeeded", appExit(t, name, "late-writer"), tr.when(name, "phase:Succeeded"))
	})
}

// TestInitContainerReads: with a native sidecar, an init container placed after it can read
// the bucket (the reason native sidecars exist); then the app writes.
func TestInitContainerReads(t *testing.T) {
	parallel(t)
	needNative(t)
	bucket := newBucket(t)
	upload(t, bucket, "input.bin", mib)
	name := podName(t, "")
	vols := []volume{{"bucket", bucket, mountPath}}
	init := workloadContainer("reader", vols, "read", "-dir", mountPath, "-name", "input.bin", "-bytes", strconv.Itoa(mib))
	createPod(t, name, podOpts{
		mode: contract.ModeNative, restart: corev1.RestartPolicyNever, volumes: vols,
		init: []corev1.Container{init},
		args: []string{"write", "-dir", mountPath, "-name", "output.bin", "-bytes", "1000"},
	})
	p := waitPod(t, name, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s\n%s\n%s\nreader log: %s", p.Status.Phase, describe(p), podEvents(name), logs(name, "reader"))
	}
	if !strings.Contains(logs(name, "reader"), "read input.bin") {
		t.Fatalf("reader did not read the object: %s", logs(name, "reader"))
	}
	expectObject(t, bucket, "output.bin", 1000)
}

// TestGcsfuseKilled: gcsfuse dies under a running app. The pod gets a Warning Event naming
// the volume and its bucket at once; the sidecar keeps running (its other volumes, if any,
// keep serving the app) and, when the app ends, exits non-zero with the reason.
func TestGcsfuseKilled(t *testing.T) {
	parallel(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root on the node to kill gcsfuse")
	}
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(5)),
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"sleep", "-for", "20s"},
		})
		// Kill it under a running app: in native mode a mount that dies before the app
		// starts makes the app's container creation fail instead (stat of the mount).
		waitPod(t, name, startWithin, "running its app", func(p *corev1.Pod) bool {
			st := containerStatus(p, appContainer)
			return st != nil && st.State.Running != nil
		})
		var pids []int
		deadline := time.Now().Add(30 * time.Second)
		for len(pids) == 0 && time.Now().Before(deadline) {
			pids = testenv.GcsfusePIDs(func(args []string) bool { return args[len(args)-2] == bucket })
			time.Sleep(300 * time.Millisecond)
		}
		if len(pids) != 1 {
			t.Fatalf("found gcsfuse pids %v for bucket %s on this host, want 1 (is the test running on the node?)", pids, bucket)
		}
		killed := time.Now()
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		e := waitEvent(t, name, 30*time.Second, regexp.MustCompile(`^`+contract.EventGcsfuseExited+`$`), bucket)
		record(t, "gcsfuse killed -> Event", killed, time.Now())
		t.Logf("event: %s %s: %s", e.Type, e.Reason, e.Message)
		if p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
			if st := containerStatus(p, contract.SidecarContainerName); st == nil || st.State.Running == nil {
				t.Errorf("sidecar not running right after one volume failed (the app is still running):\n%s", describe(p))
			}
		}
		p := waitPod(t, name, 60*time.Second, "showing the sidecar's failure after the app ended", func(p *corev1.Pod) bool {
			st := containerStatus(p, contract.SidecarContainerName)
			if st == nil {
				return false
			}
			for _, s := range []corev1.ContainerState{st.State, st.LastTerminationState} {
				if s.Terminated != nil && s.Terminated.ExitCode != 0 {
					return true
				}
			}
			return false
		})
		st := containerStatus(p, contract.SidecarContainerName)
		t.Logf("sidecar: %s", describe(p))
		term := st.State.Terminated
		if term == nil {
			term = st.LastTerminationState.Terminated
		}
		if !strings.Contains(term.Message, bucket) || !strings.Contains(term.Message, "gcsfuse died") {
			t.Errorf("sidecar exited %d with termination message %q, want the bucket and the crash", term.ExitCode, term.Message)
		}
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
}

// TestNodePluginRestart: the node plugin is restarted (by `helm upgrade` where the driver
// was installed with Helm, else by deleting its pod, as a crash would) while pods have
// mounted volumes. The mounts belong to the pods' sidecars and must keep working; the new
// plugin must still end legacy sidecars when the workload is done.
func TestNodePluginRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts the node plugin")
	}
	const size = 128 << 10
	type run struct{ bucket, name string }
	runs := map[string]run{}
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		if mode == contract.ModeNative && !nativeOK {
			continue // its subtest below says why
		}
		r := run{newBucket(t), podName(t, mode)}
		runs[mode] = r
		createPod(t, r.name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever,
			volumes: []volume{{"bucket", r.bucket, mountPath}},
			args:    []string{"loop", "-dir", mountPath, "-prefix", "part", "-bytes", strconv.Itoa(size), "-every", "500ms", "-for", "25s"},
		})
	}
	for _, r := range runs {
		waitObjects(t, r.bucket, "part", 2, 120*time.Second)
	}
	restarted := time.Now()
	if helmBin != "" {
		// Installed with Helm (hack/deploy.sh): restart it the way an upgrade does.
		upgradeNodePlugin(t)
		record(t, "helm upgrade -> new node plugin ready", restarted, time.Now())
	} else {
		restartNodePlugin(t)
		record(t, "node plugin delete -> new one ready", restarted, time.Now())
	}
	// The new plugin must also serve new volumes: it re-registered with the kubelet.
	fresh := run{newBucket(t), podName(t, "after")}
	createPod(t, fresh.name, podOpts{
		restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", fresh.bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "after.bin", "-bytes", "1000"},
	})
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		t.Run(mode, func(t *testing.T) {
			if mode == contract.ModeNative {
				needNative(t)
			}
			r := runs[mode]
			waitSucceeded(t, r.name)
			if n := partFiles(t, r.bucket, "part", size); n < 10 {
				t.Fatalf("only %d files written in 25 s across the restart", n)
			}
			t.Logf("%s: sidecar ended cleanly after the node plugin restart", mode)
		})
	}
	// Item 9: the new plugin re-evaluates pods that were done before it started (their
	// emptyDirs may already be gone): that is no failure to report.
	t.Run("no-spurious-exit-failure", noSidecarExitFailure)
	t.Run("new-pod", func(t *testing.T) {
		p := waitPod(t, fresh.name, terminalWithin, "terminal", terminal)
		if p.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("pod created after the restart: %s\n%s\n%s", p.Status.Phase, describe(p), podEvents(fresh.name))
		}
		expectObject(t, fresh.bucket, "after.bin", 1000)
	})
}

// noSidecarExitFailure fails on any sidecar exit failure Event in the test namespace.
func noSidecarExitFailure(t *testing.T) {
	ev, err := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + contract.EventSidecarExitFailed})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ev.Items {
		t.Errorf("%s on %s: %s", e.Reason, e.InvolvedObject.Name, e.Message)
	}
}
