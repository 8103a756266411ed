package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestImages: the driver runs from the images it was installed with,
// $IMAGE_REPO/<name>:$IMAGE_TAG (hack/e2e.sh passes them; CI's main run uses a repository
// and tag other than the default, as a team installing from its own registry does): the node
// plugin, the webhook, the controller and the emulator are ready on them, and the sidecar
// the webhook injects into a pod comes from the same repository and tag and runs it to
// completion. Installed from the release artifacts (E2E_FROM_RELEASE=1), each of the
// driver's images is the release's, pinned by the digest its packaged chart holds.
func TestImages(t *testing.T) {
	ctx := context.Background()
	t.Logf("images %s, release digests %v", image("<name>"), releaseDigests)
	if len(releaseDigests) > 0 {
		for _, n := range []string{"node", "webhook", "controller", "sidecar"} {
			if releaseDigests[n] == "" {
				t.Fatalf("E2E_IMAGE_DIGESTS names no digest for %s: %v", n, releaseDigests)
			}
		}
	}
	for _, c := range []struct{ selector, image string }{
		{"app=gcsfuse-csi-node", installed("node")},
		{"app=gcsfuse-webhook", installed("webhook")},
		{"app=gcsfuse-csi-controller", installed("controller")},
		{"app=gcsfuse-csi-mounter", installed("sidecar")}, // the shared mounter runs the sidecar's image
		{"app=gcs-emulator", image("emulator")},
	} {
		pods, err := cs.CoreV1().Pods("gcsfuse-csi").List(ctx, metav1.ListOptions{LabelSelector: c.selector})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("pods %s: %v (%d found)", c.selector, err, len(pods.Items))
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue // on its way out (a rollout, a test that killed it): not what serves
			}
			ctr := p.Spec.Containers[0]
			st := containerStatus(&p, ctr.Name)
			if ctr.Image != c.image || st == nil || !st.Ready || st.ImageID == "" {
				t.Errorf("pod %s container %s: image %s, ready %t; want %s, ready", p.Name, ctr.Name, ctr.Image, st != nil && st.Ready, c.image)
			}
		}
	}

	bucket := newBucket(t)
	name := podName(t, "")
	p := createPod(t, name, podOpts{
		restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "image.bin", "-bytes", "1024"},
	})
	var sidecar *corev1.Container
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if list[i].Name == contract.SidecarContainerName {
				sidecar = &list[i]
			}
		}
	}
	if sidecar == nil {
		t.Fatalf("no %s container injected", contract.SidecarContainerName)
	}
	if sidecar.Image != installed("sidecar") {
		t.Fatalf("injected sidecar image %s; want %s (the chart's images.sidecar, passed to the webhook)", sidecar.Image, installed("sidecar"))
	}
	p = waitSucceeded(t, name)
	if st := containerStatus(p, contract.SidecarContainerName); st == nil || st.ImageID == "" {
		t.Fatalf("sidecar status %+v: no image ran", st)
	}
	expectObject(t, bucket, "image.bin", 1024)
}
