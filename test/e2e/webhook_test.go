package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

const (
	driverNamespace   = "gcsfuse-csi"
	webhookDeployment = "gcsfuse-webhook"
	webhookSelector   = "app=gcsfuse-webhook"
	// admissionEvery paces the dry-run creates that probe admission (the webhook is called,
	// nothing is stored or started): a gap in service longer than this is caught.
	admissionEvery = 100 * time.Millisecond
	// realPodEvery paces the real pods, which must also get their sidecar and complete.
	realPodEvery = 2 * time.Second
	// webhookSettleTimeout bounds each wait for the webhook Deployment to be back to its
	// replicas, all ready, none terminating.
	webhookSettleTimeout = 120 * time.Second
)

// creations creates opted-in pods continuously from start until stop: dry-run ones every
// admissionEvery and real ones every realPodEvery, and records every failure.
type creations struct {
	bucket string
	stop   chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	attempts  int
	probes    int
	real      []string
	failures  []string
	notInject []string
}

func startCreations(t *testing.T, bucket string) *creations {
	c := &creations{bucket: bucket, stop: make(chan struct{})}
	prefix := podName(t, "")
	c.wg.Go(func() { c.loop(admissionEvery, func(i int) { c.create(fmt.Sprintf("%s-probe-%d", prefix, i), true) }) })
	c.wg.Go(func() { c.loop(realPodEvery, func(i int) { c.create(fmt.Sprintf("%s-%d", prefix, i), false) }) })
	return c
}

// loop calls f every interval until c.stop closes.
func (c *creations) loop(every time.Duration, f func(i int)) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		f(i)
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
	}
}

// createTimeout bounds one create: the API server's own webhook timeout is 10 s.
const createTimeout = 30 * time.Second

func (c *creations) create(name string, dryRun bool) {
	ann, spec := podTemplate(podOpts{
		restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", c.bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", name + ".bin", "-bytes", "1024"},
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann}, Spec: spec}
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Create(ctx, pod, opts)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts++
	if dryRun {
		c.probes++
	}
	switch {
	case err != nil:
		c.failures = append(c.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), name, err))
	case p.Annotations[contract.AnnotationInjected] == "":
		c.notInject = append(c.notInject, name)
	}
	if err == nil && !dryRun {
		c.real = append(c.real, name)
	}
}

// finish stops the creations and waits for the loops.
func (c *creations) finish() {
	close(c.stop)
	c.wg.Wait()
}

// TestWebhookRestart (issue 16, "Run"): the webhook is restarted the two ways a cluster
// does it, a rolling update (`kubectl rollout restart`) and a drain (the node cordoned, one
// replica evicted, its replacement Pending until the node is uncordoned), while opted-in pods
// are created continuously. With failurePolicy Fail, any moment without a serving replica
// refuses a pod: every create must succeed, get its sidecar and, for the real pods, complete
// with its object in the bucket. During the drain the PodDisruptionBudget must refuse the
// eviction of the last ready replica. Fails with webhook.replicas=1 (the drain leaves no
// replica) and with --shutdown-delay=0 (an evicted or replaced replica refuses the
// connections kube-proxy still sends it).
func TestWebhookRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts the webhook")
	}
	waitWebhookSettled(t)
	bucket := newBucket(t)
	c := startCreations(t, bucket)
	stopped := false
	defer func() {
		if !stopped {
			c.finish()
		}
	}()
	time.Sleep(2 * time.Second) // creations succeed before the restart too

	start := time.Now()
	rolloutRestartWebhook(t)
	waitWebhookSettled(t)
	record(t, "rollout restart -> all replicas new and ready", start, time.Now())

	start = time.Now()
	drainOneWebhookReplica(t)
	waitWebhookSettled(t)
	record(t, "drain of one replica -> replaced after uncordon", start, time.Now())

	time.Sleep(2 * time.Second)
	c.finish()
	stopped = true

	t.Logf("%d admissions probed (dry run, every %s), %d pods created (every %s)", c.probes, admissionEvery, len(c.real), realPodEvery)
	if len(c.failures) > 0 {
		t.Fatalf("%d of %d creates refused during the webhook's restart:\n%s", len(c.failures), c.attempts,
			strings.Join(c.failures, "\n"))
	}
	if len(c.notInject) > 0 {
		t.Fatalf("created without the sidecar: %v", c.notInject)
	}
	if c.probes < 100 || len(c.real) < 10 {
		t.Fatalf("only %d admissions and %d pods during the restart: too few to prove anything", c.probes, len(c.real))
	}
	for _, name := range c.real {
		waitSucceeded(t, name)
		expectObject(t, bucket, name+".bin", 1024)
	}
}

// drainWindow is how long the drained node stays cordoned after the evicted replica is
// gone: the webhook serves from the remaining replicas alone meanwhile.
const drainWindow = 5 * time.Second

// drainOneWebhookReplica does what `kubectl drain` does to one webhook replica: cordons its
// node and evicts it through the Eviction API (the PodDisruptionBudget applies). On a
// one-node cluster the replacement stays Pending until the node is uncordoned, so the
// remaining replicas serve alone for drainWindow; a second eviction meanwhile must be
// refused by the PodDisruptionBudget. The node is uncordoned at the end, also on failure.
func drainOneWebhookReplica(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pods, err := cs.CoreV1().Pods(driverNamespace).List(ctx, metav1.ListOptions{LabelSelector: webhookSelector})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("webhook pods: %v (%d)", err, len(pods.Items))
	}
	victim := pods.Items[0]
	cordon(t, victim.Spec.NodeName, true)
	defer cordon(t, victim.Spec.NodeName, false)
	if err := evict(ctx, victim.Name); err != nil {
		t.Fatalf("evict %s: %v", victim.Name, err)
	}
	waitPodGone(t, driverNamespace, victim.Name, webhookSettleTimeout)
	for _, p := range pods.Items[1:] {
		if err := evict(ctx, p.Name); err == nil {
			t.Errorf("a second replica, %s, was evicted while the first one's replacement is not ready: no PodDisruptionBudget?", p.Name)
		} else if !apierrors.IsTooManyRequests(err) {
			t.Errorf("evict %s: %v, want 429 from the PodDisruptionBudget", p.Name, err)
		}
	}
	time.Sleep(drainWindow)
}

func evict(ctx context.Context, pod string) error {
	return cs.CoreV1().Pods(driverNamespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: driverNamespace}})
}

// cordon marks node unschedulable (or schedulable again).
func cordon(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("cordon %s (unschedulable=%t): %v", node, unschedulable, err)
	}
}

// waitPodGone waits until the pod no longer exists.
func waitPodGone(t *testing.T, namespace, name string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_, err := cs.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s still there after %s", namespace, name, d)
}

// rolloutRestartWebhook does what `kubectl rollout restart deployment/gcsfuse-webhook`
// does: a new pod template annotation, which rolls every replica.
func rolloutRestartWebhook(t *testing.T) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`,
		time.Now().Format(time.RFC3339Nano))
	if _, err := cs.AppsV1().Deployments(driverNamespace).Patch(context.Background(), webhookDeployment,
		types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("rollout restart: %v", err)
	}
}

// waitWebhookSettled waits until the webhook Deployment has rolled out its current template
// and runs exactly its replicas, all ready and none terminating.
func waitWebhookSettled(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(webhookSettleTimeout)
	var why string
	for time.Now().Before(deadline) {
		why = webhookUnsettled(ctx)
		if why == "" {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("webhook not settled after %s: %s", webhookSettleTimeout, why)
}

// webhookUnsettled says why the webhook is not settled, "" when it is.
func webhookUnsettled(ctx context.Context) string {
	d, err := cs.AppsV1().Deployments(driverNamespace).Get(ctx, webhookDeployment, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if s := d.Status; s.ObservedGeneration < d.Generation || s.UpdatedReplicas != want || s.ReadyReplicas != want ||
		s.AvailableReplicas != want || s.Replicas != want || !available(d) {
		return fmt.Sprintf("deployment status %+v, want %d replicas", d.Status, want)
	}
	pods, err := cs.CoreV1().Pods(driverNamespace).List(ctx, metav1.ListOptions{LabelSelector: webhookSelector})
	if err != nil {
		return err.Error()
	}
	if len(pods.Items) != int(want) {
		return fmt.Sprintf("%d webhook pods (some terminating), want %d", len(pods.Items), want)
	}
	return ""
}

func available(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
