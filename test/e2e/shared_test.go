package e2e

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/moby/sys/mountinfo"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// sharedPods is how many pods of one key the e2e runs on the node at once.
const sharedPods = 50

// sharedLinger is how long a shared gcsfuse outlives the last pod of its key: the node
// plugin's --shared-linger (the chart's mounter.linger), read from its pod.
func sharedLinger(t *testing.T) time.Duration {
	t.Helper()
	for _, c := range nodePluginPod(t).Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--shared-linger="); ok {
				d, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("the node plugin's %s: %v", a, err)
				}
				return d
			}
		}
	}
	t.Fatal("the node plugin has no --shared-linger")
	return 0
}

// sharedAttrs makes every volume of a pod shared.
var sharedAttrs = map[string]string{contract.AttrMountMode: contract.MountModeShared}

// bucketGcsfuse lists the node's gcsfuse processes serving bucket (sidecars' and the
// mounter's alike).
func bucketGcsfuse(bucket string) []int {
	return testenv.GcsfusePIDs(func(args []string) bool { return len(args) >= 2 && args[len(args)-2] == bucket })
}

// The shared mount mode on the cluster: a Job whose volume is shared completes with no
// sidecar injected and its bytes in the bucket; a burst of pods over many keys all succeed;
// a killed gcsfuse, deletion mid-write, quotas, hooks, users' sidecars and identities (the
// node plugin's restart under shared mounts: TestSharedNodePluginRestart). Parallel with the
// other tests: nothing here touches what they use.
func TestSharedMountMode(t *testing.T) {
	parallel(t)
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

	// A burst of Job-shaped pods over many keys, created at once, each writing 1 MiB: every
	// key's first publishes start its mount while others of the key wait on its lock, so
	// every pod succeeds with its object whole (two of 60 once got EIO on a mount that was
	// there: an offer the mounter ignored, a bind to a mount that did not answer).
	t.Run("burst-many-keys", func(t *testing.T) {
		const keys, perKey = 10, 6
		var buckets []string
		for range keys {
			buckets = append(buckets, newBucket(t))
		}
		type job struct{ name, bucket string }
		var jobs []job
		for i := range keys * perKey {
			j := job{podName(t, "b"+strconv.Itoa(i)), buckets[i%keys]}
			createPod(t, j.name, podOpts{restart: corev1.RestartPolicyNever, attrs: sharedAttrs,
				volumes: []volume{{name: "data", bucket: j.bucket, path: mountPath}},
				args:    []string{"write", "-dir", mountPath, "-name", j.name + ".bin", "-bytes", strconv.Itoa(mib)}})
			jobs = append(jobs, j)
		}
		failed := 0
		for _, j := range jobs {
			p := waitPod(t, j.name, 3*time.Minute, "terminal", terminal)
			if p.Status.Phase != corev1.PodSucceeded {
				failed++
				t.Errorf("pod %s (bucket %s): %s\n%s\n%s", j.name, j.bucket, p.Status.Phase, logs(j.name, appContainer), podEvents(j.name))
			}
		}
		if failed > 0 {
			t.Fatalf("%d of %d pods failed", failed, len(jobs))
		}
		for _, j := range jobs {
			expectObject(t, j.bucket, j.name+".bin", mib)
			deleteNow(t, j.name)
		}
	})

	t.Run("gcsfuse-killed", func(t *testing.T) {
		b := newBucket(t)
		v := []volume{{name: "data", bucket: b, path: mountPath}}
		holder := podName(t, "holder")
		createPod(t, holder, podOpts{restart: corev1.RestartPolicyNever, volumes: v, attrs: sharedAttrs, args: []string{"sleep", "-for", "5m"}})
		hp := waitPod(t, holder, startWithin, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		pids := bucketGcsfuse(b)
		if len(pids) != 1 {
			t.Fatalf("gcsfuse %v, want one", pids)
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The pod that held the mount is told, naming the volume and the bucket.
		waitEvent(t, holder, 30*time.Second, regexp.MustCompile("^"+contract.EventGcsfuseExited+"$"), "volume data", b, "shared gcsfuse")
		// What the pod sees (its volume, from the node): I/O errors, as from a failed disk.
		if _, err := os.ReadDir(podfiles.CSITargetPath(kubeletRoot, string(hp.UID), "data")); !errors.Is(err, syscall.EIO) {
			t.Fatalf("the holder's volume after its gcsfuse died: %v, want EIO", err)
		}
		next := podName(t, "next")
		createPod(t, next, podOpts{restart: corev1.RestartPolicyNever, volumes: v, attrs: sharedAttrs,
			args: []string{"write", "-dir", mountPath, "-name", "after-kill.bin", "-bytes", "4096"}})
		waitPod(t, next, terminalWithin, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		expectObject(t, b, "after-kill.bin", 4096)
		if after := bucketGcsfuse(b); len(after) != 1 || after[0] == pids[0] {
			t.Fatalf("gcsfuse %v after the kill, want one new process", after)
		}
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), holder, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})

	// A pod deleted while it writes through a claim whose volume is shared, as a non-root
	// user with an fsGroup: it finishes its file on SIGTERM and the object is whole (nothing
	// in the pod has to outlive the app, and the mount stays until the kubelet unpublishes
	// it after the app's exit).
	t.Run("claim-nonroot-deleted-mid-write", func(t *testing.T) {
		b := newBucket(t)
		claim := staticClaim(t, b, false)
		createCSIPV(t, claim, "pv-"+b, contract.DriverName, b, map[string]string{contract.AttrBucketName: b, contract.AttrMountMode: contract.MountModeShared})
		waitClaimBound(t, claim)
		name := podName(t, "")
		const size = 6 * mib
		pod := claimPodObject(name, claim, podOpts{restart: corev1.RestartPolicyNever, grace: ptr(int64(30)),
			volumes:  []volume{{"bucket", b, mountPath}},
			security: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000)), FSGroup: ptr(int64(2000)), RunAsNonRoot: ptr(true)},
			args: []string{"write", "-dir", mountPath, "-name", "slow.bin", "-bytes", strconv.Itoa(size),
				"-chunk-delay", "100ms", "-finish-on-term", "-marker", "slow.started"}})
		created, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.Annotations[contract.AnnotationInjected] != "" || len(created.Spec.InitContainers) != 0 {
			t.Fatalf("a pod whose claim is shared got a sidecar: %v", created.Annotations)
		}
		waitMarker(t, b, "slow.started", startWithin)
		time.Sleep(2 * time.Second) // mid-file
		deleted, gone := deletePod(t, name, nil, 60*time.Second)
		expectObject(t, b, "slow.bin", size)
		record(t, "shared claim, non-root: delete mid-write -> pod gone", deleted, gone)
	})

	// A pod of the shapes users run, with a shared volume beside a sidecar one: non-root
	// (uid 1000, fsGroup), in a namespace whose ResourceQuota refuses containers without
	// limits, with its own native sidecar that writes its last batch to the shared volume
	// when the kubelet stops it after the app, and a preStop hook on the app that writes
	// there too. The webhook injects a sidecar for the other volume alone (sized to the
	// quota); the shared volume stays with the node's mounter. Deleted mid-write, every file
	// is whole: the kubelet unpublishes the shared volume only after every container of the
	// pod has stopped, whatever runs in it.
	t.Run("quota-mixed-hooks-own-sidecar", func(t *testing.T) {
		needNative(t)
		namespace := quotaNamespace(t, "shared-quota")
		sharedB, ownB := newBucket(t), newBucket(t)
		vols := []volume{{"shared", sharedB, "/shared"}, {"own", ownB, "/own"}}
		own := corev1.ResourceRequirements{Requests: resources("cpu", "50m", "memory", "32Mi"), Limits: resources("cpu", "200m", "memory", "128Mi")}
		shipper := workloadContainer("shipper", vols, "flush", "-dir", "/shared", "-name", "shipped.log",
			"-bytes", strconv.Itoa(2*mib), "-chunk-delay", "40ms") // ~1.3 s of writing after SIGTERM
		shipper.RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
		shipper.Resources = own
		const size = 4 * mib // 64 chunks 100 ms apart: ~6.4 s
		name := podName(t, "")
		pod := podObject(name, podOpts{restart: corev1.RestartPolicyNever, grace: ptr(int64(30)), volumes: vols,
			init:     []corev1.Container{shipper},
			security: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1000)), FSGroup: ptr(int64(2000)), RunAsNonRoot: ptr(true)},
			args: []string{"write", "-dir", "/own", "-name", "app.bin", "-bytes", strconv.Itoa(size),
				"-chunk-delay", "100ms", "-finish-on-term", "-marker", "app.started"},
			appLifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
				Command: []string{"/workload", "write", "-dir", "/shared", "-name", "prestop.bin", "-bytes", strconv.Itoa(mib)}}}},
		})
		pod.Namespace = namespace
		pod.Spec.Containers[0].Resources = own
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == "shared" {
				pod.Spec.Volumes[i].CSI.VolumeAttributes[contract.AttrMountMode] = contract.MountModeShared
			}
		}
		created, err := cs.CoreV1().Pods(namespace).Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s/%s: %v", namespace, name, err)
		}
		if got := created.Annotations[contract.AnnotationInjected]; got != contract.ModeNative {
			t.Fatalf("a pod with a sidecar volume beside its shared one: injected %q, want %q", got, contract.ModeNative)
		}
		waitMarker(t, ownB, "app.started", startWithin)
		if pids := bucketGcsfuse(sharedB); len(pids) != 1 {
			t.Fatalf("%d gcsfuse processes serve the shared volume (%v), want the mounter's one", len(pids), pids)
		}
		time.Sleep(2 * time.Second) // mid-file
		deleted, gone := deletePodIn(t, namespace, name, nil, 60*time.Second)
		record(t, "shared + sidecar volume, quota, preStop, own sidecar: delete -> pod gone", deleted, gone)
		expectObject(t, ownB, "app.bin", size)
		expectObject(t, sharedB, "prestop.bin", mib)
		expectObject(t, sharedB, "shipped.log", 2*mib)
	})

	// Two Kubernetes service accounts on one bucket, through Workload Identity Federation:
	// the one the bucket's policy allows reads; the other, admitted while the first one's
	// gcsfuse serves the same bucket, is refused (an Event naming its identity, I/O errors),
	// so it never rode on the first one's process.
	t.Run("identities-never-share", func(t *testing.T) {
		needRoot(t)
		reader := createServiceAccount(t, "shared-reader")
		createServiceAccount(t, "shared-stranger")
		b := newBucket(t)
		setPolicy(t, b, reader)
		uploadPoliced(t, b, "input.bin", mib)
		wif := map[string]string{contract.AttrMountMode: contract.MountModeShared, contract.AttrWorkloadIdentityProvider: localProvider}
		v := []volume{{name: "data", bucket: b, path: mountPath}}
		ok := podName(t, "reader")
		createPod(t, ok, podOpts{restart: corev1.RestartPolicyNever, serviceAccount: "shared-reader", attrs: wif, volumes: v,
			args: []string{"sleep", "-for", "2m"},
			init: []corev1.Container{workloadContainer("read", v, "read", "-dir", mountPath, "-name", "input.bin", "-bytes", strconv.Itoa(mib))}})
		waitPod(t, ok, 120*time.Second, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		stranger := podName(t, "stranger")
		createPod(t, stranger, podOpts{restart: corev1.RestartPolicyNever, serviceAccount: "shared-stranger", attrs: wif, volumes: v,
			args: []string{"read", "-dir", mountPath, "-name", "input.bin", "-bytes", strconv.Itoa(mib)}})
		waitEvent(t, stranger, 60*time.Second, regexp.MustCompile("^"+contract.EventGcsfuseFailed+"$"), "volume data", b, "shared-stranger")
		p := waitPod(t, stranger, terminalWithin, "terminal", terminal)
		if p.Status.Phase != corev1.PodFailed || !strings.Contains(logs(stranger, appContainer), "input/output error") {
			t.Fatalf("the stranger's read ended %s (want Failed with an I/O error):\n%s", p.Status.Phase, logs(stranger, appContainer))
		}
		if pids := bucketGcsfuse(b); len(pids) < 1 {
			t.Fatalf("the reader's gcsfuse is gone")
		}
		deleteNow(t, ok)
		deleteNow(t, stranger)
	})
}

// Many pods of one key on the node (sharedPods) are served by one gcsfuse in the node's
// mounter, with metrics naming their mount; the node plugin restarted under them leaves that
// gcsfuse serving, and the next pod of the key binds it; a pod of another service account
// gets its own. Serial: it restarts the node plugin, and counts the node plugin's shared-mount
// series.
func TestSharedNodePluginRestart(t *testing.T) {
	needRoot(t) // reads every process's mount namespace
	bucket := newBucket(t)
	vols := []volume{{name: "data", bucket: bucket, path: mountPath}}
	var names []string
	for i := range sharedPods {
		n := podName(t, "p"+strconv.Itoa(i))
		createPod(t, n, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, attrs: sharedAttrs,
			args: []string{"sleep", "-for", "5m"}})
		names = append(names, n)
	}
	for _, n := range names {
		waitPod(t, n, startWithin, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	pids := bucketGcsfuse(bucket)
	if len(pids) != 1 {
		t.Fatalf("%d gcsfuse processes serve the %d pods' bucket (%v), want 1", len(pids), sharedPods, pids)
	}
	// Metrics: one series per pod volume naming its key, and the mounter's gcsfuse
	// series under that key (gcsfuse's counters are polled: wait for them).
	deadline := time.Now().Add(30 * time.Second)
	for {
		mfs := scrapeNodePlugin(t)
		_, users := sample(mfs, "gcsfuse_csi_shared_mount_pods", map[string]string{"namespace": ns, "volume": "data"})
		key := ""
		if mf := mfs["gcsfuse_csi_shared_mount_pods"]; mf != nil {
			for _, m := range mf.Metric {
				for _, l := range m.Label {
					if l.GetName() == "key" && key == "" {
						key = l.GetValue()
					}
				}
			}
		}
		_, series := sample(mfs, gcsfusemetrics.Prefix+"fs_ops_count", map[string]string{"pod": contract.SharedMounterContainerName, "bucket": bucket})
		if users >= sharedPods && series > 0 && key != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node plugin metrics: %d shared-mount pod series (want %d), %d mounter gcsfuse series for the bucket (want some)", users, sharedPods, series)
		}
		time.Sleep(time.Second)
	}
	// The node plugin restarted: the serving mount is untouched, and the next pod of
	// the key binds the same gcsfuse.
	restartNodePlugin(t)
	late := podName(t, "late")
	createPod(t, late, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, attrs: sharedAttrs,
		args: []string{"write", "-dir", mountPath, "-name", "late.bin", "-bytes", "4096"}})
	waitPod(t, late, terminalWithin, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
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
	waitPod(t, other, startWithin, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if pids := bucketGcsfuse(bucket); len(pids) != 2 {
		t.Fatalf("%d gcsfuse processes after a pod of another service account (%v), want 2", len(pids), pids)
	}
	// The keys' mount points on the host, which the node plugin removes with the mounts.
	var points []string
	if hostMounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (bool, bool) { return m.Source != bucket, false }); err != nil {
		t.Fatal(err)
	} else {
		for _, m := range hostMounts {
			if strings.Contains(m.Mountpoint, "/shared/mnt/") {
				points = append(points, m.Mountpoint)
			}
		}
	}
	if len(points) != 2 {
		t.Fatalf("the host's shared mount points of the bucket: %q, want the two keys'", points)
	}
	for _, n := range append(names, other) {
		if err := cs.CoreV1().Pods(ns).Delete(context.Background(), n, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
			t.Fatal(err)
		}
	}
	// Once the linger is over, both keys' mounts are gone from every mount namespace of
	// the node, and their gcsfuse with them: the node plugin started while a key's mount
	// served pods, so its container's view of the plugin directory was made with a copy
	// of that mount, which only the view's propagation from the host (HostToContainer)
	// takes away when the key is unmounted. Without it the copy kept the dead mount, its
	// mount point could not be removed, and neither could the shared directory on
	// uninstall.
	linger := sharedLinger(t)
	deleted := time.Now()
	deadline = deleted.Add(linger + 60*time.Second)
	for {
		left, err := testenv.MountsOfSource(bucket)
		if err != nil {
			t.Fatalf("mounts of the bucket in every mount namespace: %v", err)
		}
		procs := bucketGcsfuse(bucket)
		gone := 0
		for _, p := range points {
			if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
				gone++
			}
		}
		if len(left) == 0 && len(procs) == 0 && gone == len(points) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the last pod of the keys was deleted: mounts of the bucket left %q, gcsfuse %v, %d of the mount points %q removed", time.Since(deleted).Round(time.Second), left, procs, gone, points)
		}
		time.Sleep(time.Second)
	}
}

// A shared volume with no identity of its own would read with the mounter's Application
// Default Credentials, not the pod's: in a namespace the chart's mounter.adcNamespaces does
// not name (the local values name the tests' own), an inline one is denied at admission
// (403, saying why and what to do), and one through a claim, which admission cannot judge
// (its PersistentVolume may bring a Secret, or be bound later), fails its mount with the
// node plugin's PermissionDenied in a FailedMount Event, the same words; nothing is written.
func TestSharedADCRefused(t *testing.T) {
	parallel(t)
	other := namedNamespace(t, "gcsfuse-noadc-"+strings.TrimPrefix(ns, "gcsfuse-e2e-"), nil)
	bucket := newBucket(t)
	ctx := context.Background()
	o := podOpts{restart: corev1.RestartPolicyNever, attrs: sharedAttrs, volumes: []volume{{name: "data", bucket: bucket, path: mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "adc.bin", "-bytes", "1024"}}

	inline := podObject(podName(t, "inline"), o)
	inline.Namespace = other
	_, err := cs.CoreV1().Pods(other).Create(ctx, inline, metav1.CreateOptions{})
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 403 {
		t.Fatalf("inline shared ADC volume in %s: %v, want a 403 denial from the webhook", other, err)
	}
	for _, want := range []string{`namespace "` + other + `"`, "mounter.adcNamespaces", "nodePublishSecretRef", "workloadIdentityProvider"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the denial lacks %q: %v", want, err)
		}
	}

	// Through a claim: admitted, then refused at mount.
	claim := podName(t, "claim")
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + other}, Spec: corev1.PersistentVolumeSpec{
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		ClaimRef:                      &corev1.ObjectReference{Namespace: other, Name: claim},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: contract.DriverName, VolumeHandle: bucket, VolumeAttributes: sharedAttrs}},
	}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: other}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: &empty, VolumeName: pv.Name,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := cs.CoreV1().PersistentVolumeClaims(other).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	viaClaim := claimPodObject(podName(t, "viaclaim"), claim, podOpts{restart: o.restart, volumes: []volume{{name: "bucket", bucket: bucket, path: mountPath}}, args: o.args})
	viaClaim.Namespace = other
	if _, err := cs.CoreV1().Pods(other).Create(ctx, viaClaim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a pod of a shared claim in %s: %v, want it admitted (refused at mount)", other, err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		evs, err := cs.CoreV1().Events(other).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + viaClaim.Name})
		found := ""
		if err == nil {
			for _, e := range evs.Items {
				if e.Reason == "FailedMount" && strings.Contains(e.Message, "PermissionDenied") && strings.Contains(e.Message, `namespace "`+other+`"`) {
					found = e.Message
				}
			}
		}
		if found != "" {
			t.Logf("FailedMount: %s", found)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no FailedMount Event with PermissionDenied for pod %s/%s after 90 s: %v %+v", other, viaClaim.Name, err, evs)
		}
		time.Sleep(time.Second)
	}
	if p, err := cs.CoreV1().Pods(other).Get(ctx, viaClaim.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Errorf("pod %s/%s: %v %v, want Pending (its volume refused)", other, viaClaim.Name, p.Status.Phase, err)
	}
	if pids := bucketGcsfuse(bucket); len(pids) != 0 {
		t.Errorf("gcsfuse %v serves the refused bucket", pids)
	}
}

// The node's mounter replaced under a shared pod that writes, as an upgrade's last step does
// (docs/upgrade.md) or a mistake would: a helm upgrade that changes the mounter's pod leaves
// the running one alone (OnDelete); once it is deleted, the writing pod ends Failed with a
// GcsfuseExited Event naming the mounter, never Succeeded with a short object and never
// hung; a pod created meanwhile waits (its mount refused and retried) and succeeds on the
// next mounter. Serial: it replaces the node's mounter.
func TestSharedMounterReplaced(t *testing.T) {
	ctx := context.Background()
	bucket := newBucket(t)
	vols := []volume{{name: "data", bucket: bucket, path: mountPath}}
	old := driverPod(t, "gcsfuse-csi-mounter")

	// An upgrade that changes the mounter's pod does not replace it.
	if helmBin == "" {
		t.Log("the driver was not installed with Helm (DEPLOY_WITH=kustomize): the upgrade that leaves the mounter alone is not checked here")
	} else {
		out, err := exec.Command(helmBin, "upgrade", "gcsfuse-csi", helmChart, "--namespace", "gcsfuse-csi",
			"--kubeconfig", suite.Kubeconfig, "--reuse-values",
			"--set-string", "mounter.resources.requests.cpu="+strconv.Itoa(11+rand.IntN(80))+"m").CombinedOutput()
		if err != nil {
			t.Fatalf("helm upgrade: %v\n%s", err, out)
		}
		time.Sleep(3 * time.Second) // a RollingUpdate would have deleted it by now
		if now := driverPod(t, "gcsfuse-csi-mounter"); now.UID != old.UID || now.DeletionTimestamp != nil {
			t.Fatalf("helm upgrade replaced the mounter (%s -> %s): it must wait for its pod's deletion", old.Name, now.Name)
		}
	}

	writer := podName(t, "writer")
	createPod(t, writer, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, attrs: sharedAttrs,
		args: []string{"write", "-dir", mountPath, "-name", "writer.bin", "-bytes", strconv.Itoa(4 * mib), "-chunk-delay", "200ms", "-marker", "writer.started"}})
	waitMarker(t, bucket, "writer.started", startWithin)
	if err := cs.CoreV1().Pods("gcsfuse-csi").Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(3))}); err != nil {
		t.Fatal(err)
	}
	later := podName(t, "later")
	createPod(t, later, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, attrs: sharedAttrs,
		args: []string{"write", "-dir", mountPath, "-name", "later.bin", "-bytes", "4096"}})

	p := waitPod(t, writer, 2*time.Minute, "terminal", terminal)
	if p.Status.Phase != corev1.PodFailed {
		t.Fatalf("the writer whose mounter was replaced mid-write: %s, want Failed\n%s\n%s", p.Status.Phase, logs(writer, appContainer), podEvents(writer))
	}
	waitEvent(t, writer, 30*time.Second, regexp.MustCompile("^"+contract.EventGcsfuseExited+"$"), "volume data", bucket, contract.SharedMounterContainerName)
	if o, ok := objects(t, bucket)["writer.bin"]; ok && o.Size == strconv.Itoa(4*mib) {
		t.Fatalf("writer.bin is whole (%s bytes) though its pod failed", o.Size)
	}
	waitNewDriverPod(t, "gcsfuse-csi-mounter", old.Name)
	lp := waitPod(t, later, 3*time.Minute, "terminal", terminal)
	if lp.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("the pod created while the mounter stopped: %s, want Succeeded on the next mounter\n%s", lp.Status.Phase, podEvents(later))
	}
	expectObject(t, bucket, "later.bin", 4096)
}
