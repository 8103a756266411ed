package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestInjectionWithoutAnnotation: a pod that uses the driver gets the sidecar without the
// opt-in annotation, through an inline volume, a claim bound to one of the driver's
// PersistentVolumes, or a claim not bound yet that one of them names in its claimRef (the
// three created at once), and runs to completion with its object in the bucket. A pod
// whose claim names a volume made only after admission has no sidecar: its mount is refused
// with an Event that says so, instead of hanging.
func TestInjectionWithoutAnnotation(t *testing.T) {
	parallel(t)
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
	t.Run("pv-prebound-by-claimref-same-apply", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		// A claim of no class that names no volume, then a volume whose claimRef names it,
		// then the pod at once, as one kubectl apply makes them: at admission the PV
		// controller has not bound the two yet.
		claim := "claim-" + bucket
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: ptr(""),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create claim: %v", err)
		}
		createPV(t, claim, bucket)
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
	createPVOf(t, claim, bucket, contract.DriverName)
}

// createPVOf creates the PersistentVolume of claim, serving bucket with the CSI driver named
// driver.
func createPVOf(t *testing.T, claim, bucket, driver string) {
	t.Helper()
	createCSIPV(t, claim, "pv-"+bucket, driver, bucket, nil)
}

// createCSIPV creates the PersistentVolume name for claim, of the CSI driver named driver,
// with volume handle handle and volumeAttributes attrs, deleted when the test ends.
func createCSIPV(t *testing.T, claim, name, driver, handle string, attrs map[string]string) {
	t.Helper()
	createCSIPVWithOptions(t, claim, name, driver, handle, attrs, nil)
}

// createCSIPVWithOptions is createCSIPV with the volume's spec.mountOptions.
func createCSIPVWithOptions(t *testing.T, claim, name, driver, handle string, attrs map[string]string, mountOptions []string) {
	t.Helper()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		MountOptions:                  mountOptions,
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		StorageClassName:              "",
		ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: driver, VolumeHandle: handle, VolumeAttributes: attrs}},
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

// incumbentPod is a pod written for the GKE driver (its opt-in and resource annotations, its
// volume attributes), with its inline volume's driver set to driver.
func incumbentPod(name, bucket, driver string) *corev1.Pod {
	vol := inlineVolume(volume{"bucket", bucket, mountPath}, map[string]string{
		"metadataCacheTTLSeconds": "600", "gcsfuseLoggingSeverity": "warning", "fileCacheForRangeRead": "false",
		"skipCSIBucketAccessCheck": "true", "disableMetrics": "false"}, "")
	vol.CSI.Driver = driver
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
		"gke-gcsfuse/volumes": "true", "gke-gcsfuse/memory-limit": "1Gi"}}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{workloadContainer(appContainer, []volume{{"bucket", bucket, mountPath}},
			"write", "-dir", mountPath, "-name", "gke.bin", "-bytes", "1024")},
		Volumes: []corev1.Volume{vol},
	}}
}

// runIncumbentPod creates incumbentPod and checks that it was injected, ran gcsfuse with
// the options its GKE attributes map to, and wrote its object.
func runIncumbentPod(t *testing.T, name, bucket, driver string) {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Create(context.Background(), incumbentPod(name, bucket, driver), metav1.CreateOptions{})
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

// TestIncumbentManifest: a pod written for the GKE driver (its opt-in and resource
// annotations, its volume attributes) runs with only the driver name changed.
func TestIncumbentManifest(t *testing.T) {
	parallel(t)
	runIncumbentPod(t, podName(t, ""), newBucket(t), contract.DriverName)
}

// TestAddOnPodLeftAlone: with this driver under its own name, the GKE add-on may still run
// beside it (a migration in progress): a pod written for the add-on, its volume still the
// GKE driver's, gets nothing of ours (the add-on injects its own sidecar). The add-on does
// not run here, so the pod is only admitted and deleted.
func TestAddOnPodLeftAlone(t *testing.T) {
	parallel(t)
	name := podName(t, "")
	p, err := cs.CoreV1().Pods(ns).Create(context.Background(), incumbentPod(name, newBucket(t), contract.IncumbentDriverName), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	if got := p.Annotations[contract.AnnotationInjected]; got != "" {
		t.Fatalf("a pod of the GKE add-on's got our sidecar (%s)", got)
	}
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		if c.Name == contract.SidecarContainerName {
			t.Fatalf("a pod of the GKE add-on's has a %s container", c.Name)
		}
	}
}

// TestIncumbentDriverName (issue 16, "Migrate"): installed under the GKE driver's name
// (`helm upgrade --reuse-values --set driverName=gcsfuse.csi.storage.gke.io`, restored at
// the end), the driver runs what was written for the GKE driver without any edit: the GKE
// example pod with its `driver: gcsfuse.csi.storage.gke.io` inline volume, and a
// PersistentVolume of that driver used through a claim by a pod without any annotation (the
// webhook recognises the PV as the driver's); then, under that install, every manifest of
// the migration corpus (internal/testing/migration: written from the GKE driver's documentation) runs
// or is refused as its expectation line and `kubectl gcsfuse audit` say (testCorpus).
// Costs two rollouts of the node plugin and the webhook (the timings are recorded).
func TestIncumbentDriverName(t *testing.T) {
	if helmBin == "" {
		t.Skip("the driver was not installed with Helm (E2E_HELM, E2E_HELM_CHART unset; DEPLOY_WITH=kustomize): this test switches driverName with helm upgrade")
	}
	// Restored also when the switch itself fails, so that the next tests find the default.
	t.Cleanup(func() { switchDriverName(t, contract.DriverName) })
	switchDriverName(t, contract.IncumbentDriverName)

	runIncumbentPod(t, podName(t, "inline"), newBucket(t), contract.IncumbentDriverName)

	bucket := newBucket(t)
	claim := staticClaim(t, bucket, false)
	createPVOf(t, claim, bucket, contract.IncumbentDriverName)
	waitClaimBound(t, claim)
	name := podName(t, "claim")
	p, err := cs.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{workloadContainer(appContainer, []volume{{"bucket", bucket, mountPath}},
				"write", "-dir", mountPath, "-name", "pv.bin", "-bytes", "2048")},
			Volumes: []corev1.Volume{claimVolumeOf("bucket", claim)},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if p.Annotations[contract.AnnotationInjected] == "" {
		t.Fatalf("a pod using a %s PersistentVolume was not injected: %v", contract.IncumbentDriverName, p.Annotations)
	}
	waitSucceeded(t, name)
	expectObject(t, bucket, "pv.bin", 2048)

	// Under the same install, the migration corpus (internal/testing/migration, migration_test.go).
	t.Run("corpus", testCorpus)
}

// switchDriverName installs the driver under name with `helm upgrade --reuse-values` and
// waits until the node plugin registered it with the kubelet and the webhook rolled out.
func switchDriverName(t *testing.T, name string) {
	t.Helper()
	start := time.Now()
	old := nodePluginPod(t).Name
	out, err := exec.Command(helmBin, "upgrade", "gcsfuse-csi", helmChart, "--namespace", driverNamespace,
		"--kubeconfig", suite.Kubeconfig, "--reuse-values", "--set", "driverName="+name).CombinedOutput()
	if err != nil {
		t.Fatalf("helm upgrade --set driverName=%s: %v\n%s", name, err, out)
	}
	waitNewNodePlugin(t, old)
	waitWebhookSettled(t)
	deadline := time.Now().Add(csiNodeTimeout)
	for !registered(name) {
		if time.Now().After(deadline) {
			t.Fatalf("driver %s not registered with the kubelet (CSINode) %s after the upgrade", name, csiNodeTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
	record(t, "helm upgrade driverName="+name+" -> registered, webhook rolled", start, time.Now())
}

// csiNodeTimeout bounds the wait for the kubelet to list a newly registered driver.
const csiNodeTimeout = 60 * time.Second

// registered tells whether every node's CSINode lists driver name, and only it of ours.
func registered(name string) bool {
	nodes, err := cs.StorageV1().CSINodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		return false
	}
	for _, n := range nodes.Items {
		found := false
		for _, d := range n.Spec.Drivers {
			switch d.Name {
			case name:
				found = true
			case contract.DriverName, contract.IncumbentDriverName:
				return false // the previous name is still registered
			}
		}
		if !found {
			return false
		}
	}
	return true
}
