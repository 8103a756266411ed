package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestInjectionWithoutAnnotation: a pod that uses the driver gets the sidecar without the
// opt-in annotation, through an inline volume or a claim bound to one of the driver's
// PersistentVolumes, and runs to completion with its object in the bucket. A pod whose
// claim binds only after admission has no sidecar: its mount is refused with an Event that
// says so, instead of hanging.
func TestInjectionWithoutAnnotation(t *testing.T) {
	run := func(t *testing.T, name string, vol corev1.Volume, bucket string) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{workloadContainer(appContainer, []volume{{vol.Name, bucket, mountPath}},
				"write", "-dir", mountPath, "-name", "auto.bin", "-bytes", "2048")},
			Volumes: []corev1.Volume{vol},
		}}
		p, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		if p.Annotations[contract.AnnotationInjected] == "" {
			t.Fatalf("no sidecar injected into a pod that uses the driver without the annotation (annotations %v)", p.Annotations)
		}
		waitSucceeded(t, name)
		expectObject(t, bucket, "auto.bin", 2048)
	}
	t.Run("inline", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		run(t, podName(t, ""), inlineVolume(volume{"bucket", bucket, mountPath}, nil, ""), bucket)
	})
	t.Run("claim", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		claim := staticClaim(t, bucket, true)
		waitClaimBound(t, claim)
		run(t, podName(t, ""), claimVolumeOf("bucket", claim), bucket)
	})
	t.Run("claim-bound-after-admission", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		claim := staticClaim(t, bucket, false) // its PersistentVolume does not exist yet
		name := podName(t, "")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{workloadContainer(appContainer, []volume{{"bucket", bucket, mountPath}}, "sleep", "-for", "1s")},
			Volumes:       []corev1.Volume{claimVolumeOf("bucket", claim)},
		}}
		p, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		if p.Annotations[contract.AnnotationInjected] != "" {
			t.Fatalf("injected although the claim was not bound at admission")
		}
		createPV(t, claim, bucket)
		deadline := time.Now().Add(90 * time.Second)
		for {
			ev := podEvents(name)
			if strings.Contains(ev, "FailedMount") && strings.Contains(ev, "has no "+contract.SidecarContainerName+" container") {
				break
			}
			if time.Now().After(deadline) {
				p, _ := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
				t.Fatalf("no FailedMount Event naming the missing sidecar within 90 s\n%s\n%s", describe(p), ev)
			}
			time.Sleep(time.Second)
		}
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
}

// staticClaim makes a claim pre-bound to a PersistentVolume of the driver named after it
// (created too when withPV), serving bucket.
func staticClaim(t *testing.T, bucket string, withPV bool) string {
	t.Helper()
	name := "claim-" + bucket
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		StorageClassName: ptr(""),
		VolumeName:       "pv-" + bucket,
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim: %v", err)
	}
	if withPV {
		createPV(t, name, bucket)
	}
	return name
}

func createPV(t *testing.T, claim, bucket string) {
	t.Helper()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + bucket}, Spec: corev1.PersistentVolumeSpec{
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		StorageClassName:              "",
		ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: contract.DriverName, VolumeHandle: bucket}},
	}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create volume: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
}

func waitClaimBound(t *testing.T, claim string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
		if err == nil && c.Status.Phase == corev1.ClaimBound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s not bound within 60 s: %v %v", claim, c, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func claimVolumeOf(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

// TestIncumbentManifest: a pod written for the GKE driver (its opt-in and resource
// annotations, its volume attributes) runs with only the driver name changed.
func TestIncumbentManifest(t *testing.T) {
	bucket := newBucket(t)
	name := podName(t, "")
	vol := inlineVolume(volume{"bucket", bucket, mountPath}, map[string]string{
		"metadataCacheTTLSeconds": "600", "gcsfuseLoggingSeverity": "warning", "fileCacheForRangeRead": "false",
		"skipCSIBucketAccessCheck": "true", "disableMetrics": "false"}, "")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
		"gke-gcsfuse/volumes": "true", "gke-gcsfuse/memory-limit": "1Gi"}}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{workloadContainer(appContainer, []volume{{"bucket", bucket, mountPath}},
			"write", "-dir", mountPath, "-name", "gke.bin", "-bytes", "1024")},
		Volumes: []corev1.Volume{vol},
	}}
	p, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if p.Annotations[contract.AnnotationInjected] == "" {
		t.Fatalf("not injected: %v", p.Annotations)
	}
	waitSucceeded(t, name)
	l := logs(name, contract.SidecarContainerName)
	for _, f := range []string{"--metadata-cache-ttl-secs=600", "--log-severity=warning"} {
		if !strings.Contains(l, f) {
			t.Errorf("gcsfuse not started with %s; sidecar log:\n%s", f, l)
		}
	}
	expectObject(t, bucket, "gke.bin", 1024)
}
