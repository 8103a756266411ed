package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/testenv"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// sharedAttrs makes every volume of a pod shared.
var sharedAttrs = map[string]string{contract.AttrMountMode: contract.MountModeShared}

// bucketGcsfuse lists the node's gcsfuse processes serving bucket (sidecars' and the
// mounter's alike).
func bucketGcsfuse(bucket string) []int {
	return testenv.GcsfusePIDs(func(args []string) bool { return len(args) >= 2 && args[len(args)-2] == bucket })
}

// The shared mount mode on the cluster: a Job whose volume is shared completes with no
// sidecar injected and its bytes in the bucket; many pods of one key are served by one
// gcsfuse in the node's mounter; a pod of another service account gets its own.
func TestSharedMountMode(t *testing.T) {
	bucket := newBucket(t)
	vols := []volume{{name: "data", bucket: bucket, path: mountPath}}

	t.Run("job-without-sidecar", func(t *testing.T) {
		name := podName(t, "job")
		start := time.Now()
		createJob(t, name, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, attrs: sharedAttrs,
			args: []string{"write", "-dir", mountPath, "-name", "job.bin", "-bytes", strconv.Itoa(mib)}})
		cond, at := waitJob(t, name, 90*time.Second)
		if cond != "Complete" {
			t.Fatalf("job %s: %s", name, cond)
		}
		record(t, "shared-mode Job: created to Complete", start, at)
		expectObject(t, bucket, "job.bin", mib)
		pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + name})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("job pods: %v %v", len(pods.Items), err)
		}
		p := pods.Items[0]
		if containerStatus(&p, contract.SidecarContainerName) != nil || p.Annotations[contract.AnnotationInjected] != "" {
			t.Fatalf("pod %s of a shared volume got a sidecar: %s", p.Name, describe(&p))
		}
	})

	t.Run("many-pods-one-gcsfuse", func(t *testing.T) {
		var names []string
		for i := range 5 {
			n := podName(t, "p"+strconv.Itoa(i))
			createPod(t, n, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, attrs: sharedAttrs,
				args: []string{"sleep", "-for", "5m"}})
			names = append(names, n)
		}
		for _, n := range names {
			waitPod(t, n, 90*time.Second, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		}
		pids := bucketGcsfuse(bucket)
		if len(pids) != 1 {
			t.Fatalf("%d gcsfuse processes serve the 5 pods' bucket (%v), want 1", len(pids), pids)
		}
		// The node plugin restarted: the serving mount is untouched, and the next pod of
		// the key binds the same gcsfuse.
		restartNodePlugin(t)
		late := podName(t, "late")
		createPod(t, late, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, attrs: sharedAttrs,
			args: []string{"write", "-dir", mountPath, "-name", "late.bin", "-bytes", "4096"}})
		waitPod(t, late, 90*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		expectObject(t, bucket, "late.bin", 4096)
		if after := bucketGcsfuse(bucket); len(after) != 1 || after[0] != pids[0] {
			t.Fatalf("gcsfuse %v after the node plugin's restart, want the same %v", after, pids)
		}
		// Another service account is another key: its own gcsfuse.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "shared-other", Namespace: ns}}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		other := podName(t, "other")
		createPod(t, other, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, attrs: sharedAttrs, serviceAccount: "shared-other",
			args: []string{"sleep", "-for", "5m"}})
		waitPod(t, other, 90*time.Second, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if pids := bucketGcsfuse(bucket); len(pids) != 2 {
			t.Fatalf("%d gcsfuse processes after a pod of another service account (%v), want 2", len(pids), pids)
		}
		for _, n := range append(names, other) {
			if err := cs.CoreV1().Pods(ns).Delete(context.Background(), n, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
				t.Fatal(err)
			}
		}
	})
}
