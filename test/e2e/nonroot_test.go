package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestNonRootPods: pods whose app runs as a non-root user write to the bucket without any
// mount option, in both modes. Airflow's image runs as uid 50000, gid 0, with fsGroup
// 50000 (the kubelet passes it as volume_mount_group: group-writable files of that
// group); a pod with runAsUser alone gets that uid as the files' owner. Before the driver
// did either, both failed with "Permission denied" on their first write.
func TestNonRootPods(t *testing.T) {
	parallel(t)
	for _, tt := range []struct {
		name string
		sc   *corev1.PodSecurityContext
	}{
		{"airflow-uid-50000-fsgroup", &corev1.PodSecurityContext{RunAsUser: ptr(int64(50000)), RunAsGroup: ptr(int64(0)), FSGroup: ptr(int64(50000))}},
		{"runasuser-only", &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsNonRoot: ptr(true)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			modes(t, func(t *testing.T, mode string) {
				t.Parallel()
				bucket := newBucket(t)
				name := podName(t, "")
				createPod(t, name, podOpts{
					mode: mode, restart: corev1.RestartPolicyNever, security: tt.sc,
					volumes: []volume{{"bucket", bucket, mountPath}},
					args:    []string{"write", "-dir", mountPath, "-name", "task.log", "-bytes", strconv.Itoa(mib), "-marker", "started"},
				})
				p := waitPod(t, name, terminalWithin, "terminal", terminal)
				if p.Status.Phase != corev1.PodSucceeded {
					t.Fatalf("pod %s\n%s\n%s\napp log: %s", p.Status.Phase, describe(p), podEvents(name), logs(name, appContainer))
				}
				expectObject(t, bucket, "task.log", mib)
			})
		})
	}
}

// TestRestrictedNamespaceRandomUID: a namespace enforcing the "restricted" Pod Security
// Standard, and a pod as such namespaces get them (OpenShift-style: a random non-root uid,
// no privilege escalation, no capabilities, RuntimeDefault seccomp). The injected sidecar
// passes the same checks, and the app writes as its uid.
func TestRestrictedNamespaceRandomUID(t *testing.T) {
	parallel(t)
	restricted := newNamespace(t, "restricted", map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"})
	bucket := newBucket(t)
	uid := int64(1_000_000 + rand.IntN(1_000_000))
	name := podName(t, "")
	ann, spec := podTemplate(podOpts{
		restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		security: &corev1.PodSecurityContext{RunAsUser: ptr(uid), RunAsNonRoot: ptr(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		args: []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(mib)},
	})
	spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: restricted, Annotations: ann}, Spec: spec}
	if _, err := cs.CoreV1().Pods(restricted).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a restricted pod with the sidecar injected was refused: %v", err)
	}
	waitSucceededIn(t, restricted, name)
	expectObject(t, bucket, "out.bin", mib)
}

// newNamespace creates a namespace of its own for a test (a quota, a Pod Security level),
// deleted at the end unless E2E_KEEP is set, and waits for its default service account.
func newNamespace(t *testing.T, suffix string, labels map[string]string) string {
	t.Helper()
	return namedNamespace(t, fmt.Sprintf("%s-%s", ns, suffix), labels)
}

// namedNamespace is newNamespace with the whole name given: one outside the test
// namespace's prefix, which the local values name for some settings (mounter.adcNamespaces).
func namedNamespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if suite.Keep {
			return
		}
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	for {
		_, errSA := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		_, errCM := cs.CoreV1().ConfigMaps(name).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if errSA == nil && errCM == nil {
			return name
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s: no default service account or kube-root-ca.crt", name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestUsersNativeSidecarFlushesOnStop: the user's own native sidecar (a log shipper)
// mounts the bucket and writes its last batch when the kubelet stops it, after the app.
// gcsfuse must serve it until it has exited: before the driver waited for such sidecars,
// it stopped as soon as the app was done and the batch was lost.
func TestUsersNativeSidecarFlushesOnStop(t *testing.T) {
	parallel(t)
	needNative(t)
	bucket := newBucket(t)
	name := podName(t, "")
	vols := []volume{{"bucket", bucket, mountPath}}
	shipper := workloadContainer("shipper", vols, "flush", "-dir", mountPath, "-name", "shipped.log",
		"-bytes", strconv.Itoa(2*mib), "-chunk-delay", "40ms") // ~1.3 s of writing after SIGTERM
	shipper.RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
	createPod(t, name, podOpts{
		mode: contract.ModeNative, restart: corev1.RestartPolicyNever, grace: ptr(int64(30)), volumes: vols,
		init: []corev1.Container{shipper},
		args: []string{"write", "-dir", mountPath, "-name", "result.bin", "-bytes", "1000"},
	})
	p := waitPod(t, name, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s\n%s\n%s\nshipper log: %s", p.Status.Phase, describe(p), podEvents(name), logs(name, "shipper"))
	}
	expectObject(t, bucket, "result.bin", 1000)
	expectObject(t, bucket, "shipped.log", 2*mib)
}

// TestLegacyPreStopApp: a legacy pod whose app has a preStop hook that takes the whole
// grace (a drain); the kubelet then sends the app SIGTERM and gives it 2 s more, in which
// it writes its last file. The sidecar's own preStop hook keeps gcsfuse serving until the
// app has exited: without it, the sidecar ended at the grace and the file was lost.
//
// The kubelet's 2 s are the app's, not the driver's: on a loaded node the app itself can be
// killed before its write ends (exit 137, seen in CI with the storage suites beside). Such an
// attempt proves nothing either way and is run again, at most legacyPreStopAttempts times;
// an app that finished (exit 0) with its file missing, or that failed its write (the volume
// gone under it), fails the test at once.
func TestLegacyPreStopApp(t *testing.T) {
	parallel(t)
	for i := 1; i <= legacyPreStopAttempts; i++ {
		if legacyPreStopAttempt(t, i) {
			return
		}
	}
	t.Fatalf("in %d attempts the kubelet killed the app before its 0.3 s write ended: the node is too slow to judge the sidecar", legacyPreStopAttempts)
}

// legacyPreStopAttempts bounds TestLegacyPreStopApp's attempts the app's own kill made void.
const legacyPreStopAttempts = 3

// legacyPreStopAttempt runs one pod; false when the kubelet killed the app itself.
func legacyPreStopAttempt(t *testing.T, attempt int) bool {
	t.Helper()
	bucket := newBucket(t)
	name := podName(t, strconv.Itoa(attempt))
	const grace = 6
	const size = mib / 4 // 4 chunks 100 ms apart: ~0.3 s, inside the kubelet's 2 s.
	tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	createPod(t, name, podOpts{
		mode: contract.ModeLegacy, restart: corev1.RestartPolicyNever, grace: ptr(int64(grace)),
		volumes: []volume{{"bucket", bucket, mountPath}},
		args:    []string{"flush", "-dir", mountPath, "-name", "drained.bin", "-bytes", strconv.Itoa(size), "-chunk-delay", "100ms"},
		appLifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"/workload", "sleep", "-for", "60s"}}}},
	})
	waitPod(t, name, startWithin, "running", func(p *corev1.Pod) bool {
		st := containerStatus(p, appContainer)
		return st != nil && st.State.Running != nil
	})
	deleted, gone := deletePod(t, name, nil, 60*time.Second)
	last := tr.final(name)
	if last == nil {
		t.Fatalf("attempt %d: the pod's deletion never reached the watch", attempt)
	}
	app := containerStatus(last, appContainer)
	if app == nil || app.State.Terminated == nil {
		t.Fatalf("attempt %d: no final status of the app seen\n%s", attempt, describe(last))
	}
	switch code := app.State.Terminated.ExitCode; code {
	case 0:
	case 137:
		t.Logf("attempt %d: the kubelet killed the app (exit 137) before its write ended; nothing to judge", attempt)
		return false
	default:
		t.Fatalf("attempt %d: the app's write failed (exit %d): the volume went away under it\n%s", attempt, code, describe(last))
	}
	expectObject(t, bucket, "drained.bin", size)
	record(t, "legacy preStop app: delete -> pod gone", deleted, gone)
	// The outcome, not a timing: the app's 60 s preStop hook did not hold the pod (the grace,
	// 6 s, cut it). Half the hook's length leaves room for a loaded node (16.9 s once, with
	// the storage suites beside), and still fails a pod that waited for the hook.
	if took := gone.Sub(deleted); took > 30*time.Second {
		t.Fatalf("pod took %s to go away: its 60 s preStop hook held it past the grace (%d s)", took, grace)
	}
	return true
}
