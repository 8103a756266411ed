package e2e

// Pod shapes the webhook must size or recognise beyond a plain inline volume: a namespace
// with a ResourceQuota or a LimitRange (the sidecar gets the requests and limits they ask
// for), an init container writing through a claim (served to its end when the pod is
// deleted mid-write), and a claim whose PersistentVolume asks for a file cache. Each checks
// the bytes in the bucket.

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// namespaceSetupTimeout bounds the wait for a fresh namespace's default service account and
// kube-root-ca.crt, and for a ResourceQuota's first status.
const namespaceSetupTimeout = 60 * time.Second

// waitSucceededIn is waitSucceeded in namespace.
func waitSucceededIn(t *testing.T, namespace, name string) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(terminalWithin)
	var last *corev1.Pod
	for time.Now().Before(deadline) {
		p, err := cs.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			last = p
			if terminal(p) {
				if p.Status.Phase != corev1.PodSucceeded || sidecarExitCode(p) != 0 {
					t.Fatalf("pod %s/%s %s, sidecar exit %d; want Succeeded, 0\n%s", namespace, name, p.Status.Phase, sidecarExitCode(p), describe(p))
				}
				return p
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s not terminal after %s:\n%s", namespace, name, terminalWithin, describe(last))
	return nil
}

func resources(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// sidecarResourcesOf returns the injected sidecar's resources in p.
func sidecarResourcesOf(t *testing.T, p *corev1.Pod) corev1.ResourceRequirements {
	t.Helper()
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if c.Name == contract.SidecarContainerName {
			return c.Resources
		}
	}
	t.Fatalf("pod %s has no %s", p.Name, contract.SidecarContainerName)
	return corev1.ResourceRequirements{}
}

// TestQuotaNamespaces: a pod whose own containers set requests and limits, in a namespace
// with a ResourceQuota on limits.cpu and limits.memory (which refuses any container
// without them), or with a LimitRange capping cpu at 500m, is admitted with a sidecar that
// fits, runs, and its object reaches the bucket.
func TestQuotaNamespaces(t *testing.T) {
	parallel(t)
	own := corev1.ResourceRequirements{Requests: resources("cpu", "100m", "memory", "64Mi"), Limits: resources("cpu", "200m", "memory", "128Mi")}
	run := func(t *testing.T, namespace string) *corev1.Pod {
		t.Helper()
		bucket := newBucket(t)
		name := podName(t, "")
		const size = mib
		pod := podObject(name, podOpts{restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
			args: []string{"write", "-dir", mountPath, "-name", "quota.bin", "-bytes", strconv.Itoa(size)}})
		pod.Namespace = namespace
		pod.Spec.Containers[0].Resources = own
		created, err := cs.CoreV1().Pods(namespace).Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s/%s: %v", namespace, name, err)
		}
		waitSucceededIn(t, namespace, name)
		expectObject(t, bucket, "quota.bin", size)
		return created
	}

	t.Run("ResourceQuota", func(t *testing.T) {
		p := run(t, quotaNamespace(t, "quota"))
		res := sidecarResourcesOf(t, p)
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := res.Limits[r]; !ok {
				t.Errorf("sidecar has no %s limit under quota q1: %+v", r, res)
			}
			if _, ok := res.Requests[r]; !ok {
				t.Errorf("sidecar has no %s request under quota q1: %+v", r, res)
			}
		}
	})

	t.Run("LimitRange", func(t *testing.T) {
		namespace := newNamespace(t, "limits", nil)
		lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "lr", Namespace: namespace}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:           corev1.LimitTypeContainer,
			Max:            resources("cpu", "500m"),
			Default:        resources("cpu", "300m", "memory", "256Mi"),
			DefaultRequest: resources("cpu", "100m", "memory", "64Mi"),
		}}}}
		if _, err := cs.CoreV1().LimitRanges(namespace).Create(context.Background(), lr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := run(t, namespace)
		res := sidecarResourcesOf(t, p)
		lim, ok := res.Limits[corev1.ResourceCPU]
		if !ok || lim.Cmp(resource.MustParse("500m")) > 0 {
			t.Errorf("sidecar cpu limit %v (set %v), want one at most the LimitRange's max 500m", lim.String(), ok)
		}
	})
}

// quotaNamespace creates a namespace of its own (newNamespace) with the ResourceQuota "q1" on
// limits and requests of cpu and memory, which refuses every container without them, and
// waits until the quota has a status (the API server refuses pods before).
func quotaNamespace(t *testing.T, suffix string) string {
	t.Helper()
	namespace := newNamespace(t, suffix, nil)
	hard := resources("limits.cpu", "4", "limits.memory", "8Gi", "requests.cpu", "2", "requests.memory", "4Gi")
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q1", Namespace: namespace}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if _, err := cs.CoreV1().ResourceQuotas(namespace).Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(namespaceSetupTimeout)
	for {
		got, err := cs.CoreV1().ResourceQuotas(namespace).Get(context.Background(), "q1", metav1.GetOptions{})
		if err == nil && len(got.Status.Hard) > 0 {
			return namespace
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota q1 has no status after %s: %v", namespaceSetupTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// claimPodObject is podObject with the pod's volume "bucket" served through claim instead
// of an inline volume; every container of o mounting "bucket" reads the claim.
func claimPodObject(name, claim string, o podOpts) *corev1.Pod {
	p := podObject(name, o)
	p.Spec.Volumes = []corev1.Volume{claimVolumeOf("bucket", claim)}
	return p
}

// TestClaimInitWriteDeleted is TestDeleteDuringInitWrite through a claim: the webhook must
// recognise the init container writing through a PersistentVolumeClaim as a user of the
// mount (GCSFUSE_INIT_CONTAINERS), so that the native sidecar keeps serving it when the pod
// is deleted mid-write and the object is complete.
func TestClaimInitWriteDeleted(t *testing.T) {
	needNative(t)
	parallel(t)
	bucket := newBucket(t)
	claim := staticClaim(t, bucket, true)
	waitClaimBound(t, claim)
	name := podName(t, "")
	const size = 6 * mib
	vols := []volume{{"bucket", bucket, mountPath}}
	init := workloadContainer("seed", vols, "write", "-dir", mountPath, "-name", "seed.bin", "-bytes", strconv.Itoa(size),
		"-chunk-delay", "100ms", "-finish-on-term", "-marker", "seed.started")
	pod := claimPodObject(name, claim, podOpts{mode: contract.ModeNative, restart: corev1.RestartPolicyNever, grace: ptr(int64(30)),
		volumes: vols, init: []corev1.Container{init}, args: []string{"sleep", "-for", "1s"}})
	created, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if got := created.Annotations[contract.AnnotationInjected]; got != contract.ModeNative {
		t.Fatalf("injected %q, want %s", got, contract.ModeNative)
	}
	if got := sidecarEnv(created, contract.EnvInitContainers); got != "seed" {
		t.Fatalf("sidecar %s = %q, want seed: the claim's init writer was not recognised", contract.EnvInitContainers, got)
	}
	waitMarker(t, bucket, "seed.started", startWithin)
	time.Sleep(2 * time.Second) // mid-file
	deleted, gone := deletePod(t, name, nil, 60*time.Second)
	expectObject(t, bucket, "seed.bin", size)
	record(t, "claim: delete during init write -> pod gone", deleted, gone)
}

// sidecarEnv returns the value of the sidecar's environment variable name ("" if absent).
func sidecarEnv(p *corev1.Pod, name string) string {
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if c.Name != contract.SidecarContainerName {
			continue
		}
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

// TestClaimFileCache: a claim whose PersistentVolume asks for a file cache, in its
// attributes or in its spec.mountOptions (the GKE driver's documented PersistentVolume
// form), gets the gcsfuse-cache volume mounted into the sidecar, the app reads the object
// with the right bytes, and the cache directory fills (looked at while a second container
// keeps the pod running: the kubelet removes a finished pod's emptyDirs).
func TestClaimFileCache(t *testing.T) {
	parallel(t)
	for name, pv := range map[string]struct {
		attrs        map[string]string
		mountOptions []string
	}{
		"attribute":         {attrs: map[string]string{contract.AttrFileCacheCapacity: "100Mi"}},
		"spec.mountOptions": {mountOptions: []string{"implicit-dirs", "file-cache:max-size-mb:100"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			claimFileCache(t, pv.attrs, pv.mountOptions)
		})
	}
}

func claimFileCache(t *testing.T, attrs map[string]string, mountOptions []string) {
	bucket := newBucket(t)
	const size = 2 * mib
	upload(t, bucket, "cached.bin", size)
	claim := staticClaim(t, bucket, false)
	createCSIPVWithOptions(t, claim, "pv-"+bucket, contract.DriverName, bucket, attrs, mountOptions)
	waitClaimBound(t, claim)
	name := podName(t, "")
	vols := []volume{{"bucket", bucket, mountPath}}
	read := []string{"read", "-dir", mountPath, "-name", "cached.bin", "-bytes", strconv.Itoa(size)}
	pod := claimPodObject(name, claim, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, args: read,
		extra: []corev1.Container{workloadContainer("keep", vols, "sleep", "-for", "8s")}})
	created, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	mounted := false
	for _, c := range append(slices.Clone(created.Spec.InitContainers), created.Spec.Containers...) {
		if c.Name == contract.SidecarContainerName {
			mounted = slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == contract.CacheVolumeName && m.MountPath == contract.CacheMountPath
			})
		}
	}
	hasVolume := slices.ContainsFunc(created.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == contract.CacheVolumeName && v.EmptyDir != nil })
	if !mounted || !hasVolume {
		t.Fatalf("the sidecar does not mount the %s emptyDir (mounted %v, volume %v): the PV's file cache was not seen", contract.CacheVolumeName, mounted, hasVolume)
	}
	read1 := waitPod(t, name, 120*time.Second, "app done", func(p *corev1.Pod) bool {
		st := containerStatus(p, appContainer)
		return st != nil && st.State.Terminated != nil
	})
	if st := containerStatus(read1, appContainer); st.State.Terminated.ExitCode != 0 {
		t.Fatalf("the read failed: %s", logs(name, appContainer))
	}
	if n := cacheFiles(t, read1); n == 0 {
		t.Fatalf("the %s directory holds no file after the read: gcsfuse ran without the file cache", contract.CacheVolumeName)
	}
	waitSucceeded(t, name)
}
