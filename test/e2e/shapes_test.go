package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// TestStatefulSetScaleDown: a StatefulSet's pod is mid-file when the set is scaled to zero.
// The app finishes its file on SIGTERM; the sidecar serves it to the end and the object is
// complete.
func TestStatefulSetScaleDown(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		const size = 4 * mib
		// 64 chunks, 100 ms apart: ~6.4 s of writing, finished on SIGTERM.
		ann, spec := podTemplate(podOpts{
			mode: mode, restart: corev1.RestartPolicyAlways, grace: ptr(int64(30)),
			volumes: []volume{{"bucket", bucket, mountPath}},
			args: []string{"write", "-dir", mountPath, "-name", "state.bin", "-bytes", strconv.Itoa(size),
				"-chunk-delay", "100ms", "-finish-on-term", "-marker", "started"},
		})
		labels := map[string]string{"app": name}
		set := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr(int32(1)), ServiceName: name,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: spec},
			},
		}
		ctx := context.Background()
		if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.AppsV1().StatefulSets(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
		waitMarker(t, bucket, "started", startWithin)
		time.Sleep(2 * time.Second) // mid-file
		scaled := time.Now()
		if _, err := cs.AppsV1().StatefulSets(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, name+"-0", 60*time.Second)
		expectObject(t, bucket, "state.bin", size)
		record(t, "StatefulSet scale to 0 mid-file -> pod gone", scaled, time.Now())
	})
}

// TestArgoShapedPod: Argo runs the step in "main" and its executor in "wait", which keeps
// working after main has exited (it saves main's outputs). Both mount the bucket; the
// sidecar serves until the last of them has exited, and both objects are complete.
func TestArgoShapedPod(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		vols := []volume{{"bucket", bucket, mountPath}}
		// wait: 32 chunks 50 ms apart, ~1.6 s, still writing when main is done.
		wait := workloadContainer("wait", vols, "write", "-dir", mountPath, "-name", "outputs.tgz",
			"-bytes", strconv.Itoa(2*mib), "-chunk-delay", "50ms")
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, volumes: vols,
			args:  []string{"write", "-dir", mountPath, "-name", "main.log", "-bytes", "1000"},
			extra: []corev1.Container{wait},
		})
		waitSucceeded(t, name)
		expectObject(t, bucket, "main.log", 1000)
		expectObject(t, bucket, "outputs.tgz", 2*mib)
	})
}

// TestIstioShapedPod: a mesh's proxy as a native sidecar that comes before ours in the pod.
// Ours goes right after it (gcsfuse needs the proxy's network from its first request), the
// proxy, which does not mount the bucket, is not waited for, and the Job-style pod succeeds
// with its object, our sidecar never restarted: one that exits by itself while the proxy
// runs is restarted by the kubelet, which then ends the pod only much later.
func TestIstioShapedPod(t *testing.T) {
	parallel(t)
	needNative(t)
	bucket := newBucket(t)
	name := podName(t, "")
	proxy := corev1.Container{Name: "istio-proxy", Image: image("workload"), ImagePullPolicy: corev1.PullNever,
		Command: []string{"/workload"}, Args: []string{"pause"}, RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways)}
	p := createPod(t, name, podOpts{
		mode: contract.ModeNative, restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		init: []corev1.Container{proxy},
		args: []string{"write", "-dir", mountPath, "-name", "meshed.bin", "-bytes", strconv.Itoa(mib)},
	})
	if len(p.Spec.InitContainers) != 2 || p.Spec.InitContainers[0].Name != "istio-proxy" || p.Spec.InitContainers[1].Name != contract.SidecarContainerName {
		t.Fatalf("init containers %v, want istio-proxy then %s", containerNames(p.Spec.InitContainers), contract.SidecarContainerName)
	}
	tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	done := waitSucceeded(t, name)
	expectObject(t, bucket, "meshed.bin", mib)
	for _, st := range done.Status.InitContainerStatuses {
		if st.Name == contract.SidecarContainerName && st.RestartCount != 0 {
			t.Errorf("the kubelet restarted %s %d times: it exited while istio-proxy still ran", st.Name, st.RestartCount)
		}
	}
	record(t, "Istio-shaped pod: app exit -> pod Succeeded", appExit(t, name, appContainer), tr.when(name, "phase:Succeeded"))
}

func containerNames(cs []corev1.Container) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return n
}

// cacheFiles counts the regular files under the pod's gcsfuse-cache emptyDir on the node
// (the local cluster's kubelet runs on this host).
func cacheFiles(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	root := podfiles.EmptyDirPath(kubeletRoot, string(p.UID), contract.CacheVolumeName)
	n := 0
	err := filepath.WalkDir(root, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatalf("walk the cache directory: %v", err)
	}
	return n
}
