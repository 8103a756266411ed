package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/procs"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
)

// The shared mount mode at the node's scale (-shared-pods): N pods that each read one
// object through a volume with mountMode: shared and a file cache, then stay (pause),
// against a twin of N pods with an emptyDir. It prints what each more pod costs the node
// (MemAvailable's drop with the volume minus the twin's, per pod; the key's gcsfuse RSS
// with one pod and with N) and whether the file cache is shared: the bytes gcsfuse read
// from the bucket after the first pod's read and after every pod's (the same when the
// later reads never reach the emulator), beside the bytes served from the cache.

const (
	// sharedObject is the object every pod of the shared phase reads.
	sharedObject = "cached.bin"
	// sharedRunning bounds the wait for the phase's pods to run.
	sharedRunning = 10 * time.Minute
	// sharedMetricsWait bounds the wait for gcsfuse's counters to show a read (gcsfuse
	// exports them periodically).
	sharedMetricsWait = 90 * time.Second
	// sharedMetricsSettle is how long the later reads are given to show in gcsfuse's
	// counters: more than its export period.
	sharedMetricsSettle = 30 * time.Second
	// sharedSettle is how long the node is left before MemAvailable is read.
	sharedSettle = 10 * time.Second
	// sharedCache is the file cache each shared volume asks for.
	sharedCache = "1Gi"
)

type sharedResult struct {
	pods, size                 int
	memTwin, memShared         float64 // MemAvailable drop, MiB, with N pods
	rssOne, rssAll, mounterRSS float64 // MiB
	gcsFirst, gcsAll, cacheAll float64 // bytes
	gcsfuseProcs               int
	podsPerMin                 float64
}

func (r *sharedResult) report(rep *report) {
	if r.gcsfuseProcs != 1 {
		rep.lose("shared phase: %d gcsfuse processes served the %d pods of one key, want 1", r.gcsfuseProcs, r.pods)
	}
	if r.gcsAll > r.gcsFirst {
		rep.lose("shared phase: gcsfuse read %.0f bytes from the bucket after %d pods' reads, %.0f after the first: the file cache was not shared", r.gcsAll, r.pods, r.gcsFirst)
	}
}

func (r *sharedResult) print(w io.Writer) {
	fmt.Fprintf(w, "\n| shared mount mode (%d pods of one key, each reading a %d-byte object, then staying) | figure |\n|---|---|\n", r.pods, r.size)
	fmt.Fprintf(w, "| gcsfuse processes for the key | %d |\n", r.gcsfuseProcs)
	fmt.Fprintf(w, "| node memory per more pod, the driver's share (MemAvailable drop with the volume minus the twin's, / pods) | %.2f MiB |\n", (r.memShared-r.memTwin)/float64(r.pods))
	fmt.Fprintf(w, "| the key's gcsfuse RSS: 1 pod -> %d pods (per more pod) | %.1f -> %.1f MiB (%+.2f MiB) |\n", r.pods, r.rssOne, r.rssAll, (r.rssAll-r.rssOne)/float64(max(1, r.pods-1)))
	fmt.Fprintf(w, "| the mounter's own RSS | %.1f MiB |\n", r.mounterRSS)
	fmt.Fprintf(w, "| bytes gcsfuse read from the bucket: after the 1st pod's read -> after all | %.0f -> %.0f |\n", r.gcsFirst, r.gcsAll)
	fmt.Fprintf(w, "| bytes gcsfuse served from its file cache, all pods (the later pods' reads are mostly the kernel's page cache of the shared mount, never reaching gcsfuse) | %.0f |\n", r.cacheAll)
	fmt.Fprintf(w, "| pods of the key per minute (created together after the first, to all running) | %.0f |\n", r.podsPerMin)
}

// sharedPhase runs the phase; its pods are deleted before it returns.
func (s *scale) sharedPhase(ctx context.Context) (*sharedResult, error) {
	n := s.opts.sharedPods
	r := &sharedResult{pods: n, size: s.opts.sharedBytes}
	bucket := fmt.Sprintf("scale-shared-%d", time.Now().UnixNano()%1e6)
	if err := s.createBucket(ctx, bucket); err != nil {
		return nil, err
	}
	if err := s.upload(ctx, bucket, sharedObject, s.opts.sharedBytes); err != nil {
		return nil, err
	}
	// The twin: the same pods with an emptyDir, for the node's memory without the driver.
	base := memAvailableMiB()
	if err := s.sharedPods(ctx, "shared-twin", n, ""); err != nil {
		return nil, err
	}
	sleep(ctx, sharedSettle)
	r.memTwin = base - memAvailableMiB()
	if err := s.deleteAll(ctx); err != nil {
		return nil, err
	}
	sleep(ctx, sharedSettle)
	base = memAvailableMiB()
	// The first pod alone: the key's gcsfuse starts and reads the object from the bucket.
	if err := s.sharedPods(ctx, "shared-first", 1, bucket); err != nil {
		return nil, err
	}
	first, err := s.waitGcsRead(ctx, bucket, float64(s.opts.sharedBytes))
	if err != nil {
		return nil, err
	}
	r.gcsFirst = first
	r.rssOne = keyRSS(bucket)
	start := time.Now()
	if err := s.sharedPods(ctx, "shared-more", n-1, bucket); err != nil {
		return nil, err
	}
	r.podsPerMin = float64(n-1) / time.Since(start).Minutes()
	// Every read done (the pods run only once their init container read the object);
	// gcsfuse's counters catch up within its export period.
	sleep(ctx, sharedMetricsSettle)
	mfs, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return nil, err
	}
	r.gcsAll = mounterSum(mfs, gcsfusemetrics.Prefix+"gcs_read_bytes_count", bucket)
	r.cacheAll = mounterSum(mfs, gcsfusemetrics.Prefix+"file_cache_read_bytes_count", bucket)
	sleep(ctx, sharedSettle)
	r.memShared = base - memAvailableMiB()
	r.rssAll = keyRSS(bucket)
	r.gcsfuseProcs = len(keyPIDs(bucket))
	for _, pid := range procs.PIDs(func(args []string) bool {
		return filepath.Base(args[0]) == sidecarCommand && slices.Contains(args, "--mode="+contract.ModeShared)
	}) {
		r.mounterRSS = statusKiB(pid, "VmRSS") / 1024
	}
	return r, s.deleteAll(ctx)
}

// sharedPods creates n pods of the phase (bucket "": the twin, an emptyDir) and waits until
// all run.
func (s *scale) sharedPods(ctx context.Context, run string, n int, bucket string) error {
	for i := range n {
		src := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		initArgs := []string{"sleep", "-for", "1ms"}
		if bucket != "" {
			src = corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName, VolumeAttributes: map[string]string{
				contract.AttrBucketName: bucket, contract.AttrMountMode: contract.MountModeShared, contract.AttrFileCacheCapacity: sharedCache,
			}}}
			initArgs = []string{"read", "-dir", "/a", "-name", sharedObject, "-bytes", strconv.Itoa(s.opts.sharedBytes)}
		}
		c := func(name string, args ...string) corev1.Container {
			return corev1.Container{Name: name, Image: s.opts.workloadImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/workload"},
				Args: args, VolumeMounts: []corev1.VolumeMount{{Name: "a", MountPath: "/a"}}}
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", run, i), Namespace: s.ns, Labels: map[string]string{runLabel: run}},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: new(false), TerminationGracePeriodSeconds: new(int64(1)),
				InitContainers: []corev1.Container{c("read", initArgs...)},
				Containers:     []corev1.Container{c("app", "pause")},
				Volumes:        []corev1.Volume{{Name: "a", VolumeSource: src}},
			},
		}
		c2, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := s.cs.CoreV1().Pods(s.ns).Create(c2, p, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return fmt.Errorf("create %s: %w", p.Name, err)
		}
	}
	end := time.Now().Add(sharedRunning)
	for time.Now().Before(end) {
		c, cancel := context.WithTimeout(ctx, callTimeout)
		l, err := s.cs.CoreV1().Pods(s.ns).List(c, metav1.ListOptions{LabelSelector: runLabel + "=" + run})
		cancel()
		if err == nil {
			running := 0
			for _, p := range l.Items {
				switch p.Status.Phase {
				case corev1.PodRunning:
					running++
				case corev1.PodFailed, corev1.PodSucceeded:
					return fmt.Errorf("pod %s of the shared phase ended %s: %s", p.Name, p.Status.Phase, podFailure(&p))
				}
			}
			if running == n {
				return nil
			}
		}
		sleep(ctx, time.Second)
	}
	return fmt.Errorf("the %d pods of %s not running after %s", n, run, sharedRunning)
}

// waitGcsRead waits until gcsfuse's count of bytes read from bucket reaches want.
func (s *scale) waitGcsRead(ctx context.Context, bucket string, want float64) (float64, error) {
	end := time.Now().Add(sharedMetricsWait)
	for {
		mfs, err := s.scrapeNodePlugin(ctx)
		if err != nil {
			return 0, err
		}
		got := mounterSum(mfs, gcsfusemetrics.Prefix+"gcs_read_bytes_count", bucket)
		if got >= want {
			return got, nil
		}
		if time.Now().After(end) {
			return got, fmt.Errorf("gcsfuse read %.0f bytes of bucket %s after %s, want %.0f", got, bucket, sharedMetricsWait, want)
		}
		sleep(ctx, 2*time.Second)
	}
}

// mounterSum sums the mounter's series of name for bucket.
func mounterSum(mfs map[string]*dto.MetricFamily, name, bucket string) float64 {
	var v float64
	mf := mfs[name]
	if mf == nil {
		return 0
	}
	for _, m := range mf.Metric {
		var pod, b string
		for _, l := range m.Label {
			switch l.GetName() {
			case "pod":
				pod = l.GetValue()
			case "bucket":
				b = l.GetValue()
			}
		}
		if pod == contract.SharedMounterContainerName && b == bucket {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}

// keyPIDs are the gcsfuse processes serving bucket (its name is their second-to-last
// argument).
func keyPIDs(bucket string) []int {
	return procs.PIDs(func(args []string) bool {
		return filepath.Base(args[0]) == gcsfuseCommand && len(args) >= 2 && args[len(args)-2] == bucket
	})
}

func keyRSS(bucket string) float64 {
	var v float64
	for _, pid := range keyPIDs(bucket) {
		v += statusKiB(pid, "VmRSS") / 1024
	}
	return v
}

// memAvailableMiB is the node's (this host's) MemAvailable.
func memAvailableMiB() float64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// upload puts size pattern bytes (the workload's Pattern, which its read checks) into
// bucket/name.
func (s *scale) upload(ctx context.Context, bucket, name string, size int) error {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i % 251)
	}
	u := s.opts.gcsURL + "/upload/storage/v1/b/" + url.PathEscape(bucket) + "/o?uploadType=media&name=" + url.QueryEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.gcs.Do(req)
	if err != nil {
		return fmt.Errorf("upload %s/%s: %w", bucket, name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("upload %s/%s: %s %s", bucket, name, resp.Status, msg)
	}
	return nil
}
