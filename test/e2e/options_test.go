package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// readAheadTimeout bounds the wait for the node plugin to set a mount's read-ahead: it does
// so once gcsfuse has answered the kernel, a moment after the app starts.
const readAheadTimeout = 30 * time.Second

// TestReadAheadKB (issue 25): the GKE driver's kernel mount option read_ahead_kb reaches the
// mount's backing device on the node, and only that volume's; a value out of range in an
// inline volume is denied at admission naming the option (the pod never starts on a silently
// ignored option; through a claim the mount fails with the same reason).
func TestReadAheadKB(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	name := podName(t, "")
	pod := podObject(name, podOpts{
		restart: corev1.RestartPolicyNever,
		volumes: []volume{{"bucket", bucket, mountPath}, {"plain", bucket, "/plain"}},
		args:    []string{"sleep", "-for", "600s"},
	})
	pod.Spec.Volumes[0].CSI.VolumeAttributes[contract.AttrMountOptions] = "implicit-dirs,read_ahead_kb=4096"
	created := createRaw(t, pod)
	t.Cleanup(func() { deleteNow(t, name) })
	waitPod(t, name, 120*time.Second, "app running", func(p *corev1.Pod) bool {
		s := containerStatus(p, appContainer)
		return s != nil && s.State.Running != nil
	})
	target := func(vol string) string {
		return podfiles.CSITargetPath(kubeletRoot, string(created.UID), vol)
	}
	got := readAheadOf(t, target("bucket"))
	for deadline := time.Now().Add(readAheadTimeout); got != "4096" && time.Now().Before(deadline); got = readAheadOf(t, target("bucket")) {
		time.Sleep(100 * time.Millisecond)
	}
	if got != "4096" {
		t.Fatalf("read_ahead_kb of the volume that asks for 4096 = %s", got)
	}
	if got := readAheadOf(t, target("plain")); got == "4096" {
		t.Fatal("the volume without the option got its read-ahead too")
	}

	bad := podName(t, "too-big")
	badPod := podObject(bad, podOpts{
		restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		attrs: map[string]string{contract.AttrMountOptions: "read_ahead_kb=999999999"},
		args:  []string{"write", "-dir", mountPath, "-name", "never.bin", "-bytes", "1"},
	})
	_, err := cs.CoreV1().Pods(ns).Create(context.Background(), badPod, metav1.CreateOptions{})
	if err == nil {
		deleteNow(t, bad)
		t.Fatal("a pod whose inline volume asks for read_ahead_kb=999999999 was admitted")
	}
	if !strings.Contains(err.Error(), `mount option "read_ahead_kb=999999999"`) {
		t.Fatalf("denial %q does not name the option", err)
	}
	t.Logf("denied: %v", err)
}

// readAheadOf reads the read-ahead (KiB) of the mount at target from its backing device's
// /sys/class/bdi entry (the local cluster's kubelet runs on this host).
func readAheadOf(t *testing.T, target string) string {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil || len(ms) == 0 {
		t.Fatalf("mountinfo of %s: %v (%d entries)", target, err, len(ms))
	}
	m := ms[len(ms)-1]
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", m.Major, m.Minor))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// createRaw creates pod as it is.
func createRaw(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return p
}
