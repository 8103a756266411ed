package e2e

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// The driver's dynamic provisioner (cmd/gcsfuse-csi-controller): a claim of one of its
// StorageClasses gets a directory of its own in the class's bucket, which its pods mount;
// deleting the claim deletes that directory's objects (Delete) or keeps them (Retain).

// claimPrefix is the pathPrefix of the classes made here.
const claimPrefix = "claims"

// controllerSelector selects the provisioner's pods (cmd/gcsfuse-csi-controller).
const controllerSelector = "app=gcsfuse-csi-controller"

// provisionWait bounds a claim's binding: the controller provisions in well under a second,
// and retries a refused claim after 15 s, then 30 s.
const provisionWait = 90 * time.Second

// createClass makes a StorageClass of the driver for bucket, deleted when the test ends.
func createClass(t *testing.T, bucket string, binding storagev1.VolumeBindingMode, reclaim corev1.PersistentVolumeReclaimPolicy, params map[string]string) string {
	t.Helper()
	p := map[string]string{contract.AttrBucketName: bucket, "pathPrefix": claimPrefix}
	for k, v := range params {
		p[k] = v
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc-" + bucket}, Provisioner: contract.DriverName,
		Parameters: p, VolumeBindingMode: &binding, ReclaimPolicy: &reclaim}
	if _, err := cs.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create StorageClass: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	})
	return sc.Name
}

// classClaimSpec is a 1Gi ReadWriteMany claim of class.
func classClaimSpec(class string) corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		StorageClassName: &class,
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}

// createClassClaim makes a claim of class; the test deletes it.
func createClassClaim(t *testing.T, name, class string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: classClaimSpec(class)}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim: %v", err)
	}
}

// claimVolume waits until claim is bound and returns its PersistentVolume's name.
func claimVolume(t *testing.T, claim string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
		if err == nil && c.Status.Phase == corev1.ClaimBound {
			return c.Spec.VolumeName
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s not bound within %s: %v %v\nEvents:\n%s", claim, d, c.Status, err, podEvents(claim))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitVolumeGone waits until the PersistentVolume is deleted (reclaim policy Delete: the
// provisioner deleted its objects first).
func waitVolumeGone(t *testing.T, pv string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		v, err := cs.CoreV1().PersistentVolumes().Get(context.Background(), pv, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume %s still there after %s: %v %v\nEvents:\n%s", pv, d, v.Status, err, podEvents(pv))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitClaimEvent waits for an Event on the claim with reason whose message has every one of
// substrings, and returns the message (waitEvent, on the claim's name).
func waitClaimEvent(t *testing.T, claim, reason string, d time.Duration, substrings ...string) string {
	t.Helper()
	return waitEvent(t, claim, d, regexp.MustCompile("^"+regexp.QuoteMeta(reason)+"$"), substrings...).Message
}

// claimDir is the bucket directory the provisioner made for volume pv.
func claimDir(pv string) string { return claimPrefix + "/" + pv + "/" }

// TestDynamicProvisioning: claims of the driver's StorageClasses, through the pods people
// run: a Job whose claim binds only when its pod is scheduled (WaitForFirstConsumer: the pod
// is admitted before its volume exists and must get the sidecar), a generic ephemeral volume
// (its claim is made after the pod), and the two reclaim policies. Each checks the bucket.
func TestDynamicProvisioning(t *testing.T) {
	parallel(t)
	t.Run("job-wait-for-first-consumer", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		upload(t, bucket, "outside.bin", 100) // beside the claims: never touched
		class := createClass(t, bucket, storagev1.VolumeBindingWaitForFirstConsumer, corev1.PersistentVolumeReclaimDelete, nil)
		claim := "claim-" + bucket
		createClassClaim(t, claim, class)
		name := podName(t, "")
		_, spec := podTemplate(podOpts{restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
			args: []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", "4096"}})
		spec.Volumes = []corev1.Volume{claimVolumeOf("bucket", claim)}
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(0)), Template: corev1.PodTemplateSpec{Spec: spec}}}
		if _, err := cs.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if cond, _ := waitJob(t, name, 3*time.Minute); cond != batchv1.JobComplete {
			t.Fatalf("job %s: %s; pod events:\n%s", name, cond, podEvents(name))
		}
		pv := claimVolume(t, claim, 10*time.Second)
		expectObject(t, bucket, claimDir(pv)+"out.bin", 4096)
		// Deleting the claim (the Job is done with it) deletes its directory's objects and
		// its volume, and nothing else of the bucket.
		if err := cs.BatchV1().Jobs(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationForeground)}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitVolumeGone(t, pv, 2*time.Minute)
		if got := names(objects(t, bucket)); strings.Join(got, " ") != "outside.bin" {
			t.Fatalf("bucket after the claim's deletion: %v, want only outside.bin", got)
		}
	})
	t.Run("statefulset-nonroot", func(t *testing.T) {
		// A StatefulSet's claims are made by its controller just before each pod, so each
		// pod is admitted with its claim unbound (WaitForFirstConsumer); the pods run as a
		// non-root user with an fsGroup, as most images do.
		t.Parallel()
		bucket := newBucket(t)
		class := createClass(t, bucket, storagev1.VolumeBindingWaitForFirstConsumer, corev1.PersistentVolumeReclaimDelete, nil)
		name := podName(t, "")
		ann, spec := podTemplate(podOpts{restart: corev1.RestartPolicyAlways, volumes: []volume{{"data", bucket, mountPath}},
			security: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsNonRoot: ptr(true), FSGroup: ptr(int64(1000))},
			args:     []string{"write", "-dir", mountPath, "-name", "replica.bin", "-bytes", "3000"}})
		spec.Volumes = nil // the claim template's volume
		labels := map[string]string{"app": name}
		set := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(2)), ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			Template:             corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: spec},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: classClaimSpec(class)}},
		}}
		if _, err := cs.AppsV1().StatefulSets(ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.AppsV1().StatefulSets(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
		dirs := map[string]bool{}
		for i := range 2 {
			claim := fmt.Sprintf("data-%s-%d", name, i)
			pv := claimVolume(t, claim, provisionWait)
			waitMarker(t, bucket, claimDir(pv)+"replica.bin", provisionWait) // an object appears whole, at close
			expectObject(t, bucket, claimDir(pv)+"replica.bin", 3000)
			dirs[claimDir(pv)] = true
			p, err := cs.CoreV1().Pods(ns).Get(context.Background(), fmt.Sprintf("%s-%d", name, i), metav1.GetOptions{})
			if err != nil || p.Annotations[contract.AnnotationInjected] == "" {
				t.Fatalf("replica %d: no sidecar injected (%v)", i, err)
			}
		}
		if len(dirs) != 2 {
			t.Fatalf("the two replicas share a directory: %v", dirs)
		}
	})
	t.Run("generic-ephemeral", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		class := createClass(t, bucket, storagev1.VolumeBindingImmediate, corev1.PersistentVolumeReclaimDelete, nil)
		name := podName(t, "")
		pod := podObject(name, podOpts{restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
			args: []string{"write", "-dir", mountPath, "-name", "eph.bin", "-bytes", "2048"}})
		pod.Spec.Volumes = []corev1.Volume{{Name: "bucket", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: classClaimSpec(class)}}}}}
		created, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.Annotations[contract.AnnotationInjected] == "" {
			t.Fatalf("no sidecar for a generic ephemeral volume of the driver's class (annotations %v)", created.Annotations)
		}
		waitSucceeded(t, name)
		pv := claimVolume(t, name+"-bucket", 10*time.Second)
		expectObject(t, bucket, claimDir(pv)+"eph.bin", 2048)
		// The claim belongs to the pod: deleting the pod deletes the claim, its volume and
		// its objects.
		deletePod(t, name, ptr(int64(0)), time.Minute)
		waitVolumeGone(t, pv, 2*time.Minute)
		if got := objects(t, bucket); len(got) != 0 {
			t.Fatalf("objects left after the ephemeral volume's pod was deleted: %v", names(got))
		}
	})
	t.Run("retain", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		class := createClass(t, bucket, storagev1.VolumeBindingImmediate, corev1.PersistentVolumeReclaimRetain, nil)
		claim := "claim-" + bucket
		createClassClaim(t, claim, class)
		pv := claimVolume(t, claim, provisionWait)
		t.Cleanup(func() { _ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv, metav1.DeleteOptions{}) })
		name := podName(t, "")
		createRaw(t, claimPodObject(name, claim, podOpts{restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
			args: []string{"write", "-dir", mountPath, "-name", "kept.bin", "-bytes", "1024"}}))
		waitSucceeded(t, name)
		// A claim stays while a pod that uses it exists (pvc-protection), ended or not.
		deletePod(t, name, ptr(int64(0)), time.Minute)
		if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			v, err := cs.CoreV1().PersistentVolumes().Get(context.Background(), pv, metav1.GetOptions{})
			if err == nil && v.Status.Phase == corev1.VolumeReleased {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("volume %s not Released within a minute: %v %v", pv, v.Status, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		expectObject(t, bucket, claimDir(pv)+"kept.bin", 1024)
	})
	t.Run("bucket-made-later", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		missing := bucket + "-later"
		class := createClass(t, missing, storagev1.VolumeBindingImmediate, corev1.PersistentVolumeReclaimDelete, nil)
		claim := "claim-" + bucket
		createClassClaim(t, claim, class)
		msg := waitClaimEvent(t, claim, "ProvisioningFailed", provisionWait, "bucket "+missing+" does not exist")
		t.Logf("Event: %s", msg)
		if c, _ := cs.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{}); c.Status.Phase != corev1.ClaimPending {
			t.Fatalf("claim %s is %s with its bucket missing", claim, c.Status.Phase)
		}
		createNamedBucket(t, missing)
		// The refusal is retried with back-off (15 s, then 30 s): the claim binds without
		// being edited or recreated.
		pv := claimVolume(t, claim, provisionWait)
		expectObject(t, missing, claimDir(pv), 0)
	})
	t.Run("bad-class", func(t *testing.T) {
		t.Parallel()
		bucket := newBucket(t)
		class := createClass(t, bucket, storagev1.VolumeBindingImmediate, corev1.PersistentVolumeReclaimDelete,
			map[string]string{contract.AttrMountOptions: "implicit-dirs,no-such-option"})
		claim := "claim-" + bucket
		createClassClaim(t, claim, class)
		waitClaimEvent(t, claim, "ProvisioningFailed", provisionWait, "no-such-option")
		if got := objects(t, bucket); len(got) != 0 {
			t.Fatalf("a refused claim wrote %v", names(got))
		}
	})
}

// createNamedBucket makes bucket in the emulator.
func createNamedBucket(t *testing.T, bucket string) {
	t.Helper()
	if err := emulatorCreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
}

// TestProvisionerKilled: the controller's pod is killed while claims wait for it; its
// replacement provisions them, and nothing is provisioned twice.
func TestProvisionerKilled(t *testing.T) {
	bucket := newBucket(t)
	class := createClass(t, bucket, storagev1.VolumeBindingImmediate, corev1.PersistentVolumeReclaimDelete, nil)
	pods, err := cs.CoreV1().Pods("gcsfuse-csi").List(context.Background(), metav1.ListOptions{LabelSelector: controllerSelector})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no controller pod (%s): %v", controllerSelector, err)
	}
	for _, p := range pods.Items {
		if err := cs.CoreV1().Pods("gcsfuse-csi").Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}
	// The claims are made once the killed pods are gone: only a replacement can provision
	// them.
	for _, p := range pods.Items {
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := cs.CoreV1().Pods("gcsfuse-csi").Get(context.Background(), p.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("controller pod %s not gone a minute after its deletion: %v", p.Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var claims []string
	for i := range 3 {
		claim := fmt.Sprintf("claim-%s-%d", bucket, i)
		createClassClaim(t, claim, class)
		claims = append(claims, claim)
	}
	start := time.Now()
	for _, c := range claims {
		claimVolume(t, c, provisionWait)
	}
	t.Logf("3 claims made while the controller was killed bound %s after", time.Since(start).Round(time.Millisecond))
	if got := objects(t, bucket); len(got) != 3 {
		t.Fatalf("objects %v, want one directory per claim", names(got))
	}
}

// TestProfileClasses: the chart's StorageClasses for gcsfuse's profiles (profileClasses),
// rendered by the installed chart for a bucket of the test's and applied, each provision a
// claim that a pod writes through; each pod's gcsfuse runs with its class's profile and a
// file cache directory (the classes' fileCacheCapacity).
func TestProfileClasses(t *testing.T) {
	parallel(t)
	if helmBin == "" {
		t.Fatal("the driver was not installed with Helm (E2E_HELM): the chart renders the classes")
	}
	bucket := newBucket(t)
	prefix := strings.TrimPrefix(ns, "gcsfuse-e2e-") + "-"
	out, err := exec.Command(helmBin, "template", "gcsfuse-csi", helmChart, "--show-only", "templates/storage/profile-classes.yaml",
		"--set", "profileClasses.bucket="+bucket, "--set", "profileClasses.namePrefix="+prefix,
		"--set-string", "profileClasses.fileCacheCapacity=64Mi").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	profiles := map[string]string{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var sc storagev1.StorageClass
		if err := yaml.Unmarshal([]byte(doc), &sc); err != nil {
			t.Fatalf("a class the chart rendered: %v\n%s", err, doc)
		}
		if sc.Name == "" {
			continue
		}
		if _, err := cs.StorageV1().StorageClasses().Create(context.Background(), &sc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create StorageClass %s: %v", sc.Name, err)
		}
		t.Cleanup(func() {
			_ = cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
		})
		profiles[sc.Name] = strings.TrimPrefix(sc.MountOptions[0], "profile:")
	}
	if len(profiles) != 3 {
		t.Fatalf("the chart rendered the classes %v, want 3", profiles)
	}
	pods := map[string]string{} // pod -> class
	for class := range profiles {
		claim := podName(t, strings.TrimPrefix(class, prefix))
		createClassClaim(t, claim, class)
		p := podObject(claim, podOpts{restart: corev1.RestartPolicyNever,
			args: []string{"write", "-dir", mountPath, "-name", "model.bin", "-bytes", "4096", "-then", "10s"}})
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: mountPath})
		if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", claim, err)
		}
		pods[claim] = class
	}
	// While they run: one gcsfuse per pod, each with its profile and a cache directory. Each
	// counts once seen: the pods start as their sidecars do, and on a busy node the first may
	// have ended before the last one's gcsfuse starts (a CI run saw 25 s between them).
	want := map[string]bool{}
	for _, p := range profiles {
		want[p] = true
	}
	deadline := time.Now().Add(90 * time.Second)
	got := map[string]bool{}
	for {
		for _, pid := range bucketGcsfuse(bucket) {
			args := testenv.ProcessArgs(pid)
			for _, a := range args {
				if p, ok := strings.CutPrefix(a, "--profile="); ok && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--cache-dir=") }) {
					got[p] = true
				}
			}
		}
		if maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gcsfuse of the bucket with a profile and a cache directory: %v, want %v", got, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for pod, class := range pods {
		t.Logf("pod %s of class %s", pod, class)
		waitSucceeded(t, pod)
		expectObject(t, bucket, claimVolume(t, pod, time.Second)+"/model.bin", 4096)
	}
}
