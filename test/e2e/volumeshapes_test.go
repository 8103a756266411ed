package e2e

// Volume and pod shapes the GKE driver's own suite exercises and Kubernetes' storage
// testsuites do not (issue 28, item 3): one bucket through several volumes and pods,
// sub-directories (only-dir), implicit directories, read-only volumes, pods without a
// service account token, a sidecar image and a buffer volume of the user's own, bad volume
// attributes, sidecar requests no node can meet, and gcsfuse killed by its memory limit.
// Each checks what a user would see: the bytes in the bucket, the pod's phase, the Event
// that says why.

import (
	"cmp"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// refusalTimeout bounds the wait for the Event that refuses a bad volume or an unschedulable
// pod: the kubelet's first mount attempt and the scheduler's first pass come within seconds.
const refusalTimeout = 60 * time.Second

// volumeAttr sets attribute key of the pod's inline volume name.
func volumeAttr(t *testing.T, p *corev1.Pod, name, key, value string) {
	t.Helper()
	for i := range p.Spec.Volumes {
		if v := &p.Spec.Volumes[i]; v.Name == name && v.CSI != nil {
			v.CSI.VolumeAttributes[key] = value
			return
		}
	}
	t.Fatalf("pod %s has no inline volume %s", p.Name, name)
}

// createPodObject creates p (made by podObject and edited) and returns it as admitted.
func createPodObject(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
	return got
}

// waitFailedApp waits for the pod to end Failed and returns it and the app's log.
func waitFailedApp(t *testing.T, name string) (*corev1.Pod, string) {
	t.Helper()
	p := waitPod(t, name, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodFailed {
		t.Fatalf("pod %s %s, want Failed\n%s\n%s", name, p.Status.Phase, describe(p), podEvents(name))
	}
	return p, logs(name, appContainer)
}

// TestSameBucketSeveralMounts: one bucket through two volumes of one pod (two gcsfuse
// processes in one sidecar) and through a second pod at the same time; every writer's object
// reaches the bucket, and a pod started afterwards reads all of them through its own mount.
func TestSameBucketSeveralMounts(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	one, two := volume{"one", bucket, "/one"}, volume{"two", bucket, "/two"}
	pair, other, reader := podName(t, "pair"), podName(t, "other"), podName(t, "reader")
	createPod(t, pair, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, volumes: []volume{one, two},
		args:  []string{"write", "-dir", "/one", "-name", "one.bin", "-bytes", strconv.Itoa(2 * mib)},
		extra: []corev1.Container{workloadContainer("second", []volume{two}, "write", "-dir", "/two", "-name", "two.bin", "-bytes", strconv.Itoa(2*mib))},
	})
	createPod(t, other, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "three.bin", "-bytes", strconv.Itoa(2 * mib)},
	})
	waitSucceeded(t, pair)
	waitSucceeded(t, other)
	for _, n := range []string{"one.bin", "two.bin", "three.bin"} {
		expectObject(t, bucket, n, 2*mib)
	}
	createPod(t, reader, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		args: []string{"read", "-dir", mountPath, "-name", "one.bin,two.bin,three.bin", "-bytes", strconv.Itoa(2 * mib)},
	})
	waitSucceeded(t, reader)
	if l := logs(reader, appContainer); strings.Count(l, "bytes ok") != 3 {
		t.Fatalf("reader log:\n%s", l)
	}
}

// TestOnlyDir: two volumes of one bucket, each with its own only-dir, are two disjoint
// trees: the pod reads an object under its directory at the volume's root, and each file
// written lands under its volume's directory, none at the bucket's root.
func TestOnlyDir(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	upload(t, bucket, "team-a/input.bin", mib)
	name := podName(t, "")
	a, b := volume{"a", bucket, "/a"}, volume{"b", bucket, "/b"}
	p := podObject(name, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, volumes: []volume{a, b},
		args: []string{"write", "-dir", "/a", "-name", "out.bin", "-bytes", strconv.Itoa(mib)},
		extra: []corev1.Container{
			workloadContainer("other", []volume{b}, "write", "-dir", "/b", "-name", "out.bin", "-bytes", strconv.Itoa(2*mib)),
			workloadContainer("input", []volume{a}, "read", "-dir", "/a", "-name", "input.bin", "-bytes", strconv.Itoa(mib)),
		},
	})
	volumeAttr(t, p, "a", contract.AttrMountOptions, "only-dir=team-a")
	volumeAttr(t, p, "b", contract.AttrMountOptions, "only-dir=team-b")
	createPodObject(t, p)
	waitSucceeded(t, name)
	expectObject(t, bucket, "team-a/out.bin", mib)
	expectObject(t, bucket, "team-b/out.bin", 2*mib)
	if objs := objects(t, bucket); len(objs) != 3 {
		t.Fatalf("bucket holds %v, want team-a/input.bin, team-a/out.bin, team-b/out.bin", names(objs))
	}
}

// TestImplicitDirs: an object whose parent "directories" exist only as a name prefix (no
// placeholder objects, as gsutil or another tool uploads) is reachable through a volume with
// implicit-dirs, and not without it: there the lookup fails with "no such file", as gcsfuse
// documents.
func TestImplicitDirs(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	upload(t, bucket, "deep/a/object.bin", mib)
	with, without := podName(t, "with"), podName(t, "without")
	for _, c := range []struct {
		name string
		opts string
	}{{with, "implicit-dirs"}, {without, ""}} {
		p := podObject(c.name, podOpts{
			mode: credMode(), restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
			args: []string{"read", "-dir", mountPath, "-name", "deep/a/object.bin", "-bytes", strconv.Itoa(mib)},
		})
		if c.opts != "" {
			volumeAttr(t, p, "bucket", contract.AttrMountOptions, c.opts)
		}
		createPodObject(t, p)
	}
	waitSucceeded(t, with)
	_, l := waitFailedApp(t, without)
	if !strings.Contains(l, "no such file or directory") {
		t.Fatalf("without implicit-dirs the read failed otherwise than with ENOENT:\n%s", l)
	}
}

// TestReadOnlyVolume: a CSI volume with readOnly: true serves reads, refuses writes with
// EROFS (the app sees "read-only file system", nothing reaches the bucket), and the
// sidecar still exits 0: a refused write is the app's failure, not the volume's.
func TestReadOnlyVolume(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	upload(t, bucket, "input.bin", mib)
	name := podName(t, "")
	vol := volume{"bucket", bucket, mountPath}
	p := podObject(name, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, volumes: []volume{vol},
		args:  []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(mib)},
		extra: []corev1.Container{workloadContainer("input", []volume{vol}, "read", "-dir", mountPath, "-name", "input.bin", "-bytes", strconv.Itoa(mib))},
	})
	p.Spec.Volumes[0].CSI.ReadOnly = ptr(true)
	createPodObject(t, p)
	got, l := waitFailedApp(t, name)
	if !strings.Contains(l, "read-only file system") {
		t.Fatalf("the write to a read-only volume failed otherwise than with EROFS:\n%s", l)
	}
	if st := containerStatus(got, "input"); st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
		t.Fatalf("the read of a read-only volume failed:\n%s\n%s", describe(got), logs(name, "input"))
	}
	if c := sidecarExitCode(got); c != 0 {
		t.Fatalf("sidecar exit code %d, want 0\n%s", c, describe(got))
	}
	if objs := objects(t, bucket); len(objs) != 1 {
		t.Fatalf("bucket holds %v after writes to a read-only volume, want input.bin only", names(objs))
	}
}

// TestNoServiceAccountToken: a Job whose pods set automountServiceAccountToken: false (a
// hardened namespace's policy) still mounts, writes and completes: the sidecar needs no API
// token of the pod's.
func TestNoServiceAccountToken(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	name := podName(t, "")
	createJob(t, name, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, noToken: true,
		volumes: []volume{{"bucket", bucket, mountPath}},
		args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(mib)},
	})
	if cond, _ := waitJob(t, name, 120*time.Second); cond != batchv1.JobComplete {
		t.Fatalf("job %s: %s, want Complete", name, cond)
	}
	expectObject(t, bucket, "out.bin", mib)
}

// badClaim creates a bound claim whose PersistentVolume has volume handle handle and
// attributes attrs, named after base (a valid bucket name), and returns the claim's name.
func badClaim(t *testing.T, base, handle string, attrs map[string]string) string {
	t.Helper()
	claim := staticClaim(t, base, false)
	createCSIPV(t, claim, "pv-"+base, contract.DriverName, handle, attrs)
	waitClaimBound(t, claim)
	return claim
}

// TestBadVolumeRefused: a volume with an unknown mount option, a boolean option with a value
// that is not a boolean, or an invalid bucket name never mounts, and the user is told which
// and why. Inline, the pod is denied at admission (kubectl apply prints the reason; a pod
// stuck in ContainerCreating would be a Job that never ends). Through a claim (the
// PersistentVolume may be bound or replaced after admission), the pod's FailedMount Event
// names the option or the bucket, and the app never starts (no empty directory to write
// into).
func TestBadVolumeRefused(t *testing.T) {
	parallel(t)
	for _, c := range []struct {
		name, bucket, options string
		want                  []string
	}{
		{"unknown-option", "", "no-such-option", []string{`mount option "no-such-option"`, "is not a supported gcsfuse option"}},
		{"invalid-boolean", "", "implicit-dirs=maybe", []string{`mount option "implicit-dirs=maybe"`, `value "maybe" is not true or false`}},
		{"invalid-bucket", "Not_A.Bucket!", "", []string{`bucket name "Not_A.Bucket!"`, "invalid character"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base := newBucket(t)
			bucket := cmp.Or(c.bucket, base)
			attrs := map[string]string{}
			if c.options != "" {
				attrs[contract.AttrMountOptions] = c.options
			}
			o := podOpts{
				mode: credMode(), restart: corev1.RestartPolicyNever, grace: ptr(int64(1)),
				volumes: []volume{{"bucket", bucket, mountPath}},
				args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", "10"},
			}

			inline := podObject(podName(t, "inline"), o)
			for k, v := range attrs {
				volumeAttr(t, inline, "bucket", k, v)
			}
			_, err := cs.CoreV1().Pods(ns).Create(context.Background(), inline, metav1.CreateOptions{})
			if err == nil {
				deleteNow(t, inline.Name)
				t.Fatalf("pod with a bad inline volume admitted, want a denial with %q", c.want)
			}
			for _, w := range append([]string{"volume bucket:"}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("denial %q lacks %q", err, w)
				}
			}
			t.Logf("inline: %v", err)

			claimed := podObject(podName(t, "claim"), o)
			claimed.Spec.Volumes = []corev1.Volume{claimVolumeOf("bucket", badClaim(t, base, bucket, attrs))}
			createPodObject(t, claimed)
			e := waitEvent(t, claimed.Name, refusalTimeout, regexp.MustCompile(`^FailedMount$`), append([]string{"InvalidArgument"}, c.want...)...)
			t.Logf("claim: event: %s", e.Message)
			got, err := cs.CoreV1().Pods(ns).Get(context.Background(), claimed.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if st := containerStatus(got, appContainer); st != nil && (st.State.Running != nil || st.State.Terminated != nil) {
				t.Fatalf("the app started although its volume was refused:\n%s", describe(got))
			}
			deleteNow(t, claimed.Name)
		})
	}
}

// TestSidecarResourcesTooHigh: sidecar resources by annotation that cannot hold are said, not
// hidden: a request above its own limit is denied at admission naming both annotations; a
// request no node can meet leaves the pod Pending with the scheduler's "Insufficient cpu"
// Event, and nothing of it starts.
func TestSidecarResourcesTooHigh(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	o := podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, grace: ptr(int64(1)),
		volumes: []volume{{"bucket", bucket, mountPath}},
		args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", "10"},
	}
	above := podObject(podName(t, "above-limit"), o)
	above.Annotations[contract.AnnotationCPURequest] = "500m"
	above.Annotations[contract.AnnotationCPULimit] = "250m"
	_, err := cs.CoreV1().Pods(ns).Create(context.Background(), above, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), contract.AnnotationCPURequest) || !strings.Contains(err.Error(), "greater than the limit") {
		t.Fatalf("pod with a sidecar cpu request above its limit: %v, want a denial naming %s", err, contract.AnnotationCPURequest)
	}
	t.Logf("denied: %v", err)

	huge := podObject(podName(t, "unschedulable"), o)
	huge.Annotations[contract.AnnotationCPURequest] = "1000"
	huge.Annotations[contract.AnnotationCPULimit] = "1000"
	got := createPodObject(t, huge)
	if q := sidecarResourcesOf(t, got).Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("1000")) != 0 {
		t.Fatalf("sidecar cpu request %s, want the annotation's 1000", q.String())
	}
	e := waitEvent(t, huge.Name, refusalTimeout, regexp.MustCompile(`^FailedScheduling$`), "Insufficient cpu")
	t.Logf("event: %s", e.Message)
	if p, err := cs.CoreV1().Pods(ns).Get(context.Background(), huge.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Fatalf("unschedulable pod: %v %s", err, describe(p))
	}
	deleteNow(t, huge.Name)
}

// TestCustomSidecarImage: a pod that declares a container named gcsfuse-sidecar lends its
// image to the injected sidecar (a pinned or mirrored sidecar image of the user's own): the
// sidecar runs from that image, in the webhook's place and with its settings, and the
// pod's object reaches the bucket.
func TestCustomSidecarImage(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	name := podName(t, "")
	custom := image("sidecar-custom")
	p := podObject(name, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(mib)},
	})
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: contract.SidecarContainerName, Image: custom})
	got := createPodObject(t, p)
	var sidecars []corev1.Container
	for _, c := range append(append([]corev1.Container{}, got.Spec.InitContainers...), got.Spec.Containers...) {
		if c.Name == contract.SidecarContainerName {
			sidecars = append(sidecars, c)
		}
	}
	if len(sidecars) != 1 || sidecars[0].Image != custom || sidecars[0].SecurityContext == nil {
		t.Fatalf("admitted pod's sidecars %+v, want one, injected with image %s", sidecars, custom)
	}
	waitSucceeded(t, name)
	expectObject(t, bucket, "out.bin", mib)
}

// TestCustomBufferVolume: a pod that brings its own gcsfuse-buffer volume (here a RAM disk
// with a size limit) gets no second one: the sidecar mounts the pod's, and a write through
// it completes.
func TestCustomBufferVolume(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	name := podName(t, "")
	p := podObject(name, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(8 * mib)},
	})
	limit := resource.MustParse("64Mi")
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: contract.BufferVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}})
	got := createPodObject(t, p)
	var buffers []corev1.Volume
	for _, v := range got.Spec.Volumes {
		if v.Name == contract.BufferVolumeName {
			buffers = append(buffers, v)
		}
	}
	if len(buffers) != 1 || buffers[0].EmptyDir == nil || buffers[0].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Fatalf("admitted pod's buffer volumes %+v, want the pod's own RAM disk only", buffers)
	}
	mounted := false
	for _, c := range append(append([]corev1.Container{}, got.Spec.InitContainers...), got.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			mounted = mounted || (c.Name == contract.SidecarContainerName && m.Name == contract.BufferVolumeName && m.MountPath == contract.BufferMountPath)
		}
	}
	if !mounted {
		t.Fatalf("the sidecar does not mount the pod's buffer volume at %s:\n%s", contract.BufferMountPath, describe(got))
	}
	waitSucceeded(t, name)
	expectObject(t, bucket, "out.bin", 8*mib)
}

// oomLimit is the sidecar memory limit of TestGcsfuseOOMKilled: above an idle sidecar and
// gcsfuse (about 13 + 42 MiB, README's scale figures), below them with one streaming-write
// block of 32 MiB filled.
const oomLimit = "72Mi"

// TestGcsfuseOOMKilled: a sidecar memory limit too small for a large write gets gcsfuse
// OOM-killed. The app's write fails (an I/O error, not a short object taken for complete),
// the pod's GcsfuseExited (or GcsfuseFailed) Event says "OOM-killed" and names the
// annotation that raises the limit, and the pod ends Failed.
func TestGcsfuseOOMKilled(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	name := podName(t, "")
	p := podObject(name, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, grace: ptr(int64(5)),
		volumes: []volume{{"bucket", bucket, mountPath}},
		args:    []string{"write", "-dir", mountPath, "-name", "big.bin", "-bytes", strconv.Itoa(256 * mib)},
	})
	p.Annotations[contract.AnnotationMemoryRequest] = oomLimit
	p.Annotations[contract.AnnotationMemoryLimit] = oomLimit
	volumeAttr(t, p, "bucket", contract.AttrMountOptions, "enable-streaming-writes=true")
	createPodObject(t, p)
	// Killed while writing (GcsfuseExited), or, should its start-up alone not fit, while
	// starting (GcsfuseFailed): either way the Event says OOM-killed.
	e := waitEvent(t, name, 120*time.Second, regexp.MustCompile(`^(`+contract.EventGcsfuseExited+`|`+contract.EventGcsfuseFailed+`)$`),
		bucket, "OOM-killed", contract.AnnotationMemoryLimit)
	t.Logf("event: %s", e.Message)
	got, l := waitFailedApp(t, name)
	if st := containerStatus(got, appContainer); st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode == 0 {
		t.Fatalf("the app's write under a killed gcsfuse did not fail:\n%s\n%s", describe(got), l)
	}
	if o, ok := objects(t, bucket)["big.bin"]; ok && o.Size == strconv.Itoa(256*mib) {
		t.Fatalf("big.bin is complete in the bucket although gcsfuse was killed writing it")
	}
}
