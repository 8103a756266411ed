package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

const mib = 1 << 20

// sidecarExitCode is the sidecar's final exit code (-1 when it has not terminated).
func sidecarExitCode(p *corev1.Pod) int32 {
	st := containerStatus(p, contract.SidecarContainerName)
	if st == nil || st.State.Terminated == nil {
		return -1
	}
	return st.State.Terminated.ExitCode
}

// createJob creates a Job of one pod from o and returns it.
func createJob(t *testing.T, name string, o podOpts) *batchv1.Job {
	t.Helper()
	ann, spec := podTemplate(o)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(0)),
			Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: spec},
		},
	}
	if o.restart == corev1.RestartPolicyOnFailure {
		job.Spec.BackoffLimit = ptr(int32(3))
	}
	j, err := cs.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create job %s: %v", name, err)
	}
	return j
}

// waitJob waits for the Job's Complete or Failed condition and returns which one, and when
// this host first saw it.
func waitJob(t *testing.T, name string, d time.Duration) (batchv1.JobConditionType, time.Time) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		j, err := cs.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			for _, c := range j.Status.Conditions {
				if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
					return c.Type, time.Now()
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("job %s: neither Complete nor Failed after %s", name, d)
	return "", time.Time{}
}

// jobPod returns the name of the Job's only pod, as seen by the tracker.
func jobPod(t *testing.T, tr *tracker) string {
	t.Helper()
	pods := tr.podNames()
	if len(pods) != 1 {
		t.Fatalf("job has %d pods %v, want 1", len(pods), pods)
	}
	return pods[0]
}

// TestJobNever is the users' main case (Airflow's KubernetesPodOperator, batch Jobs): a Job
// with restartPolicy Never writes its result to the bucket and exits. The Job must
// complete (the sidecar must not keep the pod Running) and the object must be complete.
func TestJobNever(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		name    string
		exit    int
		want    batchv1.JobConditionType
		phase   corev1.PodPhase
		appCode int32
	}{
		{"success", 0, batchv1.JobComplete, corev1.PodSucceeded, 0},
		{"failure", 3, batchv1.JobFailed, corev1.PodFailed, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			modes(t, func(t *testing.T, mode string) {
				t.Parallel()
				bucket := newBucket(t)
				name := podName(t, "")
				tr := track(t, metav1.ListOptions{LabelSelector: "job-name=" + name})
				created := time.Now()
				createJob(t, name, podOpts{
					mode: mode, restart: corev1.RestartPolicyNever,
					volumes: []volume{{"bucket", bucket, mountPath}},
					args:    []string{"write", "-dir", mountPath, "-name", "result.bin", "-bytes", strconv.Itoa(2 * mib), "-exit", strconv.Itoa(tc.exit)},
				})
				cond, condAt := waitJob(t, name, 120*time.Second)
				pod := jobPod(t, tr)
				p := waitPod(t, pod, 30*time.Second, "terminal", terminal)
				if cond != tc.want || p.Status.Phase != tc.phase {
					t.Fatalf("job %s, pod %s; want %s, %s\n%s\n%s", cond, p.Status.Phase, tc.want, tc.phase, describe(p), podEvents(pod))
				}
				if st := containerStatus(p, appContainer); st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode != tc.appCode {
					t.Fatalf("app container: %s", describe(p))
				}
				if c := sidecarExitCode(p); c != 0 {
					t.Fatalf("sidecar exit code %d, want 0 (a clean stop):\n%s\nsidecar log:\n%s", c, describe(p), logs(pod, contract.SidecarContainerName))
				}
				expectObject(t, bucket, "result.bin", 2*mib)
				together := sidecarFirst(t, tr, pod, p)
				t.Logf("the kubelet saw app and sidecar gone in the same status: %v", together)
				exit := appExit(t, pod, appContainer)
				record(t, "create -> app started", created, appStart(t, pod, appContainer))
				record(t, "app exit -> pod "+string(tc.phase), exit, tr.when(pod, "phase:"+string(tc.phase)))
				record(t, "app exit -> job "+string(cond), exit, condAt)
			})
		})
	}
}

// TestJobOnFailure: the app fails on its first run and succeeds when the kubelet restarts
// it. The sidecar must survive the app's failure (it is not the end of the workload under
// OnFailure) and the second run must still write through the mount.
func TestJobOnFailure(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		tr := track(t, metav1.ListOptions{LabelSelector: "job-name=" + name})
		createJob(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyOnFailure,
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"write", "-dir", mountPath, "-name", "result.bin", "-bytes", strconv.Itoa(mib), "-fail-first-run"},
		})
		cond, condAt := waitJob(t, name, 150*time.Second)
		pod := jobPod(t, tr)
		p := waitPod(t, pod, 30*time.Second, "terminal", terminal)
		if cond != batchv1.JobComplete || p.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("job %s, pod %s; want Complete, Succeeded\n%s\n%s", cond, p.Status.Phase, describe(p), podEvents(pod))
		}
		if st := containerStatus(p, appContainer); st.RestartCount < 1 {
			t.Fatalf("app restarted %d times, want >= 1 (the first run fails on purpose)", st.RestartCount)
		}
		// The failed first run did not end the sidecar; the successful second one did, by
		// itself, once.
		sidecarFirst(t, tr, pod, p)
		expectObject(t, bucket, "result.bin", mib)
		record(t, "app exit -> job Complete", appExit(t, pod, appContainer), condAt)
	})
}

// TestBarePodNever: a pod (no Job) with restartPolicy Never must reach Succeeded.
func TestBarePodNever(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever,
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"write", "-dir", mountPath, "-name", "airflow-result.json", "-bytes", "4096"},
		})
		waitSucceeded(t, name)
		expectObject(t, bucket, "airflow-result.json", 4096)
		record(t, "app exit -> pod Succeeded", appExit(t, name, appContainer), tr.when(name, "phase:Succeeded"))
	})
}

// TestMissingBucket: a volume naming a bucket that does not exist must not look like an
// empty directory (writes would be lost at close): the pod gets a Warning Event that names
// the bucket, the app's access fails with an I/O error, and the pod ends Failed instead of
// hanging in CreateContainerError on a dead mount.
func TestMissingBucket(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := fmt.Sprintf("e2e-no-such-bucket-%s", mode)
		name := podName(t, "")
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(5)),
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"write", "-dir", mountPath, "-name", "x", "-bytes", "10"},
		})
		e := waitEvent(t, name, 90*time.Second, regexp.MustCompile(`(?i)gcsfuse.*fail`), bucket, "does not exist")
		t.Logf("event: %s %s: %s", e.Type, e.Reason, e.Message)
		if e.Type != corev1.EventTypeWarning {
			t.Fatalf("event %s is %s, want Warning", e.Reason, e.Type)
		}
		p := waitPod(t, name, 60*time.Second, "terminal phase", terminal)
		if p.Status.Phase != corev1.PodFailed {
			t.Fatalf("pod %s although its bucket does not exist:\n%s", p.Status.Phase, describe(p))
		}
		if s := containerStatus(p, contract.SidecarContainerName); s != nil && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
			t.Fatalf("sidecar exited 0 although its volume failed:\n%s", describe(p))
		}
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
}

// TestBucketBusyAtStart (native, legacy, shared): a storage endpoint that answers the
// sidecar's (or the shared mounter's) bucket check with 503 (busy, as GCS and the emulator
// under load do) does not fail the volume: the sidecar tries again, logs why, and the Job's pod ends Succeeded with its object. Before, one slow or
// failed answer failed the volume for good (a CI run lost 40 pods to one emulator stall).
func TestBucketBusyAtStart(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		// The bucket check is the first storage request of a volume: it meets both.
		admin(t, http.MethodPut, "faults/"+bucket, map[string]int{"status": http.StatusServiceUnavailable, "count": 2})
		t.Cleanup(func() { admin(t, http.MethodDelete, "faults/"+bucket, nil) })
		name := podName(t, "")
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever,
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", "4096"},
		})
		p := waitPod(t, name, terminalWithin, "terminal phase", terminal)
		l := logs(name, contract.SidecarContainerName)
		if p.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("pod %s, want Succeeded after the bucket check's retries:\n%s\nsidecar log:\n%s", p.Status.Phase, describe(p), l)
		}
		expectObject(t, bucket, "out.bin", 4096)
		if n := strings.Count(l, "bucket check failed; trying again"); n < 2 || !strings.Contains(l, "503") {
			t.Fatalf("the sidecar's log shows %d retries, want at least 2 naming the 503:\n%s", n, l)
		}
	})
	// The shared mounter runs the same check for a key's first pod.
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		admin(t, http.MethodPut, "faults/"+bucket, map[string]int{"status": http.StatusServiceUnavailable, "count": 2})
		t.Cleanup(func() { admin(t, http.MethodDelete, "faults/"+bucket, nil) })
		name := podName(t, "")
		createPod(t, name, podOpts{
			restart: corev1.RestartPolicyNever, attrs: sharedAttrs,
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", "4096"},
		})
		p := waitPod(t, name, terminalWithin, "terminal phase", terminal)
		if p.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("pod %s, want Succeeded after the shared mounter's bucket check retried:\n%s\n%s", p.Status.Phase, describe(p), podEvents(name))
		}
		expectObject(t, bucket, "out.bin", 4096)
		var retries int
		for _, l := range strings.Split(componentLog(t, "app=gcsfuse-csi-mounter"), "\n") {
			if strings.Contains(l, "bucket check failed; trying again") && strings.Contains(l, bucket) {
				retries++
			}
		}
		if retries < 2 {
			t.Fatalf("the shared mounter's log shows %d retries of bucket %s, want at least 2", retries, bucket)
		}
	})
}

// TestRuntimeWatchSource: the node plugin learns container exits from the CRI event stream on
// containerd 2.x and polls on containerd 1.x, and says which in its log. The runtime and its
// version come from the node object, so the test holds on whichever runtime hack/ started.
func TestRuntimeWatchSource(t *testing.T) {
	ctx := context.Background()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	rt := nodes.Items[0].Status.NodeInfo.ContainerRuntimeVersion // e.g. containerd://2.4.2
	name, version, _ := strings.Cut(rt, "://")
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(version, "v"), ".", 2)[0])
	want := "polling the container runtime"
	if name == "containerd" && major >= 2 {
		want = "using the container runtime's event stream"
	}
	if l := nodePluginLog(t); !strings.Contains(l, want) {
		t.Fatalf("runtime %s: the node plugin log does not say %q:\n%s", rt, want, l)
	}
	t.Logf("runtime %s: %s", rt, want)
}

// TestAutoMode: without the sidecar-mode annotation the webhook picks the mode by itself from
// the versions: native where the API server and every kubelet are at 1.29 or newer, legacy
// (a regular container) before. Either way the pod runs to completion with its object. Where
// the mode is legacy, a pod whose init container reads the bucket is refused at admission
// with the version that ruled native out; where it is native, that pod runs.
func TestAutoMode(t *testing.T) {
	parallel(t)
	want := contract.ModeLegacy
	if nativeOK {
		want = contract.ModeNative
	}
	t.Run("picks-"+want, func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		p := createPod(t, name, podOpts{
			restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
			args: []string{"write", "-dir", mountPath, "-name", "auto.bin", "-bytes", "4096"},
		})
		if got := p.Annotations[contract.AnnotationInjected]; got != want {
			t.Fatalf("kubelet v%s: the webhook injected %q, want %q (annotations %v)", kubeletVersion, got, want, p.Annotations)
		}
		native := false
		for _, c := range p.Spec.InitContainers {
			if c.Name == contract.SidecarContainerName && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				native = true
			}
		}
		legacy := false
		for _, c := range p.Spec.Containers {
			legacy = legacy || c.Name == contract.SidecarContainerName
		}
		if native != (want == contract.ModeNative) || legacy != (want == contract.ModeLegacy) {
			t.Fatalf("sidecar placement does not match mode %s: native init container %v, regular container %v", want, native, legacy)
		}
		t.Logf("kubelet v%s: the webhook picked %s", kubeletVersion, want)
		waitSucceeded(t, name)
		expectObject(t, bucket, "auto.bin", 4096)
	})
	t.Run("init-container-reader", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		upload(t, bucket, "input.bin", 1000)
		name := podName(t, "")
		vols := []volume{{"bucket", bucket, mountPath}}
		ann, spec := podTemplate(podOpts{
			restart: corev1.RestartPolicyNever, volumes: vols,
			init: []corev1.Container{workloadContainer("reader", vols, "read", "-dir", mountPath, "-name", "input.bin", "-bytes", "1000")},
			args: []string{"sleep", "-for", "1s"},
		})
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann}, Spec: spec}
		_, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		if nativeOK {
			if err != nil {
				t.Fatalf("kubelet v%s: refused, but a native sidecar serves init containers: %v", kubeletVersion, err)
			}
			p := waitPod(t, name, terminalWithin, "terminal", terminal)
			if p.Status.Phase != corev1.PodSucceeded {
				t.Fatalf("pod %s\n%s\n%s", p.Status.Phase, describe(p), podEvents(name))
			}
			return
		}
		if err == nil {
			t.Fatalf("kubelet v%s: pod admitted with a legacy sidecar and an init container reading the bucket: it would stay Pending forever", kubeletVersion)
		}
		for _, s := range []string{"reader", "older than " + nativeSidecarMinVersion.String()} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("refusal does not contain %q: %v", s, err)
			}
		}
		t.Logf("refused: %v", err)
	})
}

// TestMachineType: the node plugin gives every gcsfuse the node's machine type (the Node's
// instance-type label, "unknown" without one), which spares gcsfuse its metadata-server
// lookups at start (~210 ms per mount where the GCE metadata server does not answer).
func TestMachineType(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	want := "unknown"
	for _, l := range []string{corev1.LabelInstanceTypeStable, corev1.LabelInstanceType} {
		if v := nodes.Items[0].Labels[l]; v != "" {
			want = v
			break
		}
	}
	// The node plugin reads its Node in the background (it does not hold mounts up for it:
	// after a restart during an API outage, TestAPIServerOutage, it learns it later).
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(nodePluginLog(t), "machineType="+want) {
		if time.Now().After(deadline) {
			t.Fatalf("the node plugin has not learnt the machine type %q within 60 s:\n%s", want, nodePluginLog(t))
		}
		time.Sleep(500 * time.Millisecond)
	}
	bucket := newBucket(t)
	name := podName(t, "")
	createPod(t, name, podOpts{mode: contract.ModeLegacy, restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "m.bin", "-bytes", "1024"}})
	p := waitPod(t, name, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s\n%s\n%s", p.Status.Phase, describe(p), podEvents(name))
	}
	l := logs(name, contract.SidecarContainerName)
	if !strings.Contains(l, "--machine-type="+want) {
		t.Fatalf("node machine type %q: gcsfuse was not started with --machine-type=%s; sidecar log:\n%s", want, want, l)
	}
	expectObject(t, bucket, "m.bin", 1024)
}
