// Command scale starts a storm of pods on the local cluster (hack/scale.sh brings it up) and
// prints what it cost: N pods with two gcsfuse volumes each, created at once, each writing a
// little to both and exiting, against a twin run of the same pods without volumes. It
// measures from this host (the cluster's processes are this machine's) and from the
// components' own logs and metrics, prints a table with the goals beside it, and then
// checks that nothing leaked: mounts, gcsfuse processes, hand-off and metrics sockets, exit
// files. It asserts nothing but the leak count (exit 1 when something leaked or the run did
// not finish); the figures are for the README.
//
// Every request goes to the API server or the emulator on the cluster's veth; loops are
// bounded in count and time.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
)

const (
	driverNS    = "gcsfuse-csi"
	metricsPort = "9920"
	// createWorkers is how many pods are created at once (the client's QPS limit applies).
	createWorkers = 25
	// sampleEvery is how often process memory and CPU are sampled during a run.
	sampleEvery = 200 * time.Millisecond
	// leakWait bounds the wait for the kubelet to clean up after the pods are deleted.
	leakWait = 90 * time.Second
)

func main() { os.Exit(run()) }

func run() int {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the local cluster")
	n := flag.Int("n", 100, "pods per run")
	size := flag.Int("bytes", 64<<10, "bytes each pod writes to each volume")
	gcsURL := flag.String("gcs-url", "http://10.241.0.2:14443", "the emulator as this host reaches it")
	kubeletRoot := flag.String("kubelet-root", "/var/lib/kubelet", "the kubelet's root directory on this host")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound of each run")
	workloadImage := flag.String("workload-image", "gcsfuse-csi.local/workload:e2e", "the e2e workload image ($IMAGE_REPO/workload:$IMAGE_TAG)")
	flag.Parse()
	if *n < 1 || *n > 500 || *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "scale: need -kubeconfig and 1 <= -n <= 500")
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	cfg.QPS, cfg.Burst = 100, 200
	s := &scale{cs: kubernetes.NewForConfigOrDie(cfg), n: *n, size: *size, gcsURL: *gcsURL, kubeletRoot: *kubeletRoot, timeout: *timeout, workloadImage: *workloadImage}
	if err := s.main(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	return 0
}

type scale struct {
	cs          kubernetes.Interface
	n, size     int
	gcsURL      string
	kubeletRoot string
	timeout     time.Duration
	ns          string
	// workloadImage is the image of every pod's app (hack/images.sh built it).
	workloadImage string

	mu   sync.Mutex
	uids []string // of every pod created, for the leak checks
}

// podTimes are one pod's moments, on this machine's clock (the containers share it).
type podTimes struct {
	created, appStart, appExit, done time.Time
	// createCall is how long the Create call took (admission included).
	createCall time.Duration
}

func (s *scale) main() error {
	ctx := context.Background()
	s.ns = fmt.Sprintf("scale-%d", rand.IntN(1e6))
	if _, err := s.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() {
		_ = s.cs.CoreV1().Namespaces().Delete(context.Background(), s.ns, metav1.DeleteOptions{})
	}()
	if err := s.waitNamespaceReady(ctx); err != nil {
		return err
	}
	buckets := []string{fmt.Sprintf("scale-a-%d", rand.IntN(1e6)), fmt.Sprintf("scale-b-%d", rand.IntN(1e6))}
	for _, b := range buckets {
		if err := s.createBucket(b); err != nil {
			return err
		}
	}
	fmt.Printf("scale: namespace %s, %d pods per run, %d bytes per volume, buckets %v\n", s.ns, s.n, s.size, buckets)

	fmt.Println("scale: admission burst (opted-in pods that no node takes)")
	burst, err := s.admissionBurst(ctx, buckets)
	if err != nil {
		return err
	}
	fmt.Println("scale: twin run (no volumes)")
	twin, err := s.runPods(ctx, "twin", nil)
	if err != nil {
		return err
	}
	if err := s.deleteAll(ctx); err != nil {
		return err
	}

	before, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return err
	}
	apiBefore, err := apiServerMetrics(ctx, s.cs)
	if err != nil {
		return err
	}
	npPID := findProcess("gcsfuse-csi-node")
	if npPID == 0 {
		return fmt.Errorf("no gcsfuse-csi-node process on this machine")
	}
	cpu0 := cpuSeconds(npPID)
	smp := startSampler(npPID)
	runStart := time.Now()
	fmt.Println("scale: volume run (2 gcsfuse volumes per pod)")
	vols, err := s.runPods(ctx, "vol", buckets)
	peaks := smp.stop()
	cpuUsed := cpuSeconds(npPID) - cpu0
	if err != nil {
		return err
	}
	after, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return err
	}
	publish := s.publishLatencies(ctx, runStart)
	ready, readySidecar := s.readyLatencies(ctx, runStart)
	admission := s.admissionLatencies(ctx, runStart)
	if err := s.deleteAll(ctx); err != nil {
		return err
	}
	leaks := s.waitNoLeaks()

	startTwin, startVol := durations(twin, func(p podTimes) time.Duration { return p.appStart.Sub(p.created) }),
		durations(vols, func(p podTimes) time.Duration { return p.appStart.Sub(p.created) })
	doneTwin, doneVol := durations(twin, func(p podTimes) time.Duration { return p.done.Sub(p.appExit) }),
		durations(vols, func(p podTimes) time.Duration { return p.done.Sub(p.appExit) })
	fmt.Printf("\n=== scale: %d pods x 2 volumes at once, each writing %d bytes to each and exiting (twin: the same pods without volumes)\n", s.n, s.size)
	fmt.Printf("| measure | figures | goal |\n|---|---|---|\n")
	fmt.Printf("| admission burst, quiet node: webhook (its log) | %s | p99 <= 20 ms |\n", stats(burst.webhook))
	fmt.Printf("| admission burst, quiet node: API server's histogram (bucket bound) | p99 <= %s | p99 <= 20 ms |\n", burst.apiServer)
	fmt.Printf("| admission burst, quiet node: pod Create call | %s | |\n", stats(burst.create))
	fmt.Printf("| pod created -> app start, volumes | %s | |\n", stats(startVol))
	fmt.Printf("| pod created -> app start, twin | %s | |\n", stats(startTwin))
	fmt.Printf("| app exit -> pod Succeeded, volumes | %s | |\n", stats(doneVol))
	fmt.Printf("| app exit -> pod Succeeded, twin | %s | |\n", stats(doneTwin))
	fmt.Printf("| storm: webhook admission (its log) | %s | p99 <= 20 ms |\n", stats(admission))
	fmt.Printf("| storm: pod Create call, volumes (admission included) | %s | |\n", stats(durations(vols, func(p podTimes) time.Duration { return p.createCall })))
	fmt.Printf("| storm: pod Create call, twin (no webhook) | %s | |\n", stats(durations(twin, func(p podTimes) time.Duration { return p.createCall })))
	fmt.Printf("| storm: webhook admission (API server's histogram, bucket bound) | p99 <= %s | p99 <= 20 ms |\n", apiServerAdmissionP99(ctx, s.cs, apiBefore))
	fmt.Printf("| NodePublishVolume (node plugin log) | %s | |\n", stats(publish))
	fmt.Printf("| NodePublishVolume -> gcsfuse serving, incl. the kubelet starting the sidecar (node plugin log) | %s | |\n", stats(ready))
	fmt.Printf("| sidecar took the descriptor -> gcsfuse serving (the mount's own start) | %s | p99 <= 2 s |\n", stats(readySidecar))
	fmt.Printf("| NodePublishVolume -> serving, %s (bucket bound) | p99 <= %s | |\n", csidriver.MetricVolumeReady, histogramP99(before, after, csidriver.MetricVolumeReady, nil))
	fmt.Printf("| node plugin peak RSS (sampled every %s) | %.1f MiB (VmHWM since start %.1f MiB) | <= 64 MiB |\n", sampleEvery, peaks.nodeRSS, vmHWM(npPID))
	fmt.Printf("| node plugin CPU during the run | %.2f s | |\n", cpuUsed)
	fmt.Printf("| gcsfuse RSS per volume (peak per process, %d processes) | %s | |\n", len(peaks.gcsfuse), mibStats(peaks.gcsfuse))
	fmt.Printf("| sidecar RSS (peak per process, %d processes) | %s | |\n", len(peaks.sidecar), mibStats(peaks.sidecar))
	fmt.Printf("| peak gcsfuse processes at once | %d | |\n", peaks.maxGcsfuse)
	fmt.Printf("| leaks after the pods are gone: mounts, gcsfuse processes, sockets, exit files | %d, %d, %d, %d | 0 |\n",
		leaks.mounts, leaks.procs, leaks.sockets, leaks.exitFiles)
	if leaks.total() > 0 || len(vols) != s.n {
		return fmt.Errorf("%d leaks, %d of %d pods measured", leaks.total(), len(vols), s.n)
	}
	return nil
}

func (s *scale) waitNamespaceReady(ctx context.Context) error {
	for range 300 {
		_, errSA := s.cs.CoreV1().ServiceAccounts(s.ns).Get(ctx, "default", metav1.GetOptions{})
		_, errCM := s.cs.CoreV1().ConfigMaps(s.ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if errSA == nil && errCM == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("namespace %s: no default service account after 30 s", s.ns)
}

func (s *scale) createBucket(name string) error {
	body, _ := json.Marshal(map[string]string{"name": name})
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(s.gcsURL+"/storage/v1/b?project=scale", "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("create bucket %s: %s %s", name, resp.Status, msg)
	}
	return nil
}

// pod is one storm pod: with buckets, two inline volumes and the sidecar; without, two
// emptyDirs in their place.
func (s *scale) pod(name string, buckets []string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: map[string]string{"scale": "1"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  new(false),
			TerminationGracePeriodSeconds: new(int64(5)),
			Containers: []corev1.Container{{
				Name: "app", Image: s.workloadImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/workload"},
				Args:         []string{"write", "-dir", "/a", "-also", "/b", "-name", name + ".bin", "-bytes", strconv.Itoa(s.size)},
				VolumeMounts: []corev1.VolumeMount{{Name: "a", MountPath: "/a"}, {Name: "b", MountPath: "/b"}},
			}},
		},
	}
	for i, v := range []string{"a", "b"} {
		if buckets == nil {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			continue
		}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: contract.DriverName, VolumeAttributes: map[string]string{contract.AttrBucketName: buckets[i]},
		}}})
	}
	if buckets != nil {
		// A 2-core node cannot give 100 sidecars the default 100m CPU request: the per-pod
		// override, request only (a limit of "0" means none).
		p.Annotations = map[string]string{contract.AnnotationInject: "true",
			contract.AnnotationCPURequest: "5m", contract.AnnotationCPULimit: "0"}
	}
	return p
}

// runPods creates s.n pods at once, waits for all to succeed, and returns their moments.
func (s *scale) runPods(ctx context.Context, prefix string, buckets []string) (map[string]podTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var mu sync.Mutex
	times := map[string]podTimes{}
	done := map[string]time.Time{}
	// see records a pod's status; it reports an error for a failed pod and true once all
	// s.n pods succeeded.
	see := func(p *corev1.Pod) (bool, error) {
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %s", p.Name, p.Status.Message)
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := done[p.Name]; !seen && p.Status.Phase == corev1.PodSucceeded {
			done[p.Name] = time.Now()
		}
		return len(done) == s.n, nil
	}
	watchDone := make(chan error, 1)
	go func() { // ends when every pod is done, one failed, or ctx ends
		// A watch may end early (the API server closes watches): list, then watch again
		// from that list's version, a bounded number of times.
		for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
			l, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "scale=1"})
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			for i := range l.Items {
				if all, err := see(&l.Items[i]); err != nil || all {
					watchDone <- err
					return
				}
			}
			w, err := s.cs.CoreV1().Pods(s.ns).Watch(ctx, metav1.ListOptions{LabelSelector: "scale=1", ResourceVersion: l.ResourceVersion})
			if err != nil {
				time.Sleep(time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || ev.Type == watch.Deleted {
					continue
				}
				if all, err := see(p); err != nil || all {
					w.Stop()
					watchDone <- err
					return
				}
			}
			w.Stop()
		}
		watchDone <- fmt.Errorf("pods not done within %s", s.timeout)
	}()
	if err := inParallel(s.n, func(i int) error {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		t0 := time.Now()
		created, err := s.cs.CoreV1().Pods(s.ns).Create(ctx, s.pod(name, buckets), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		s.mu.Lock()
		s.uids = append(s.uids, string(created.UID))
		s.mu.Unlock()
		mu.Lock()
		times[name] = podTimes{created: t0, createCall: time.Since(t0)}
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	if err := <-watchDone; err != nil {
		return nil, err
	}
	// The app's own START/EXIT lines (ms): the kubelet's timestamps have 1 s resolution.
	for name, pt := range times {
		start, exit, err := s.appMoments(ctx, name)
		if err != nil {
			return nil, err
		}
		pt.appStart, pt.appExit, pt.done = start, exit, done[name]
		times[name] = pt
	}
	return times, nil
}

type burstResult struct {
	webhook, create []time.Duration
	apiServer       string
}

// inParallel runs fn(0) ... fn(n-1) on createWorkers goroutines, all of them to the end,
// and returns the first error (nil for none).
func inParallel(n int, fn func(i int) error) error {
	jobs := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Go(func() { // ends when jobs is closed
			for i := range jobs {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	return <-errs
}

// admissionBurst creates s.n opted-in pods at once with a node selector no node has: the
// webhook admits them and they stay Pending, so the node is quiet and the figures are the
// admission's alone. The pods are deleted before it returns.
func (s *scale) admissionBurst(ctx context.Context, buckets []string) (burstResult, error) {
	var r burstResult
	apiBefore, err := apiServerMetrics(ctx, s.cs)
	if err != nil {
		return r, err
	}
	start := time.Now()
	var mu sync.Mutex
	if err := inParallel(s.n, func(i int) error {
		p := s.pod(fmt.Sprintf("burst-%03d", i), buckets)
		p.Spec.NodeSelector = map[string]string{"gcsfuse-csi.scale/no-such-node": "true"}
		t0 := time.Now()
		if _, err := s.cs.CoreV1().Pods(s.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
		mu.Lock()
		r.create = append(r.create, time.Since(t0))
		mu.Unlock()
		return nil
	}); err != nil {
		return r, fmt.Errorf("admission burst: %w", err)
	}
	r.webhook = s.admissionLatencies(ctx, start)
	r.apiServer = apiServerAdmissionP99(ctx, s.cs, apiBefore)
	return r, s.deleteAll(ctx)
}

var (
	startLine = regexp.MustCompile(`(?m)^START (\d+)$`)
	exitLine  = regexp.MustCompile(`(?m)^EXIT (\d+) `)
)

func (s *scale) appMoments(ctx context.Context, pod string) (start, exit time.Time, err error) {
	b, err := s.cs.CoreV1().Pods(s.ns).GetLogs(pod, &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
	if err != nil {
		return start, exit, fmt.Errorf("logs of %s: %w", pod, err)
	}
	ms := func(re *regexp.Regexp) time.Time {
		if m := re.FindSubmatch(b); m != nil {
			v, _ := strconv.ParseInt(string(m[1]), 10, 64)
			return time.UnixMilli(v)
		}
		return time.Time{}
	}
	start, exit = ms(startLine), ms(exitLine)
	if start.IsZero() || exit.IsZero() {
		return start, exit, fmt.Errorf("pod %s: no START/EXIT line in %q", pod, b)
	}
	return start, exit, nil
}

// deleteAll deletes the storm's pods and waits (bounded) until they are gone.
func (s *scale) deleteAll(ctx context.Context) error {
	if err := s.cs.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "scale=1"}); err != nil {
		return err
	}
	for range 600 {
		l, err := s.cs.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "scale=1"})
		if err == nil && len(l.Items) == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("pods of %s not gone after 2 min", s.ns)
}

// ---------------------------------------------------------------------------- measures

// nodePluginPod is the node plugin's pod name.
func (s *scale) nodePluginPod(ctx context.Context) (string, error) {
	l, err := s.cs.CoreV1().Pods(driverNS).List(ctx, metav1.ListOptions{LabelSelector: "app=gcsfuse-csi-node"})
	if err != nil || len(l.Items) != 1 {
		return "", fmt.Errorf("node plugin pods: %v", err)
	}
	return l.Items[0].Name, nil
}

func (s *scale) scrapeNodePlugin(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	pod, err := s.nodePluginPod(ctx)
	if err != nil {
		return nil, err
	}
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	raw, err := s.cs.CoreV1().Pods(driverNS).ProxyGet("http", pod, metricsPort, "/metrics", nil).DoRaw(c)
	if err != nil {
		return nil, fmt.Errorf("scrape the node plugin: %w", err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(raw))
}

// logLines returns the lines of a pod's log since t.
func (s *scale) logLines(ctx context.Context, namespace, selector string, since time.Time) []string {
	l, err := s.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil
	}
	var out []string
	st := metav1.NewTime(since.Add(-time.Second))
	for _, p := range l.Items {
		b, err := s.cs.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &st}).DoRaw(ctx)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			out = append(out, sc.Text())
		}
	}
	return out
}

// field returns the value of key in a slog line: text (key=value, the node plugin) or JSON
// (the webhook).
func field(line, key string) string {
	if t := strings.TrimSpace(line); strings.HasPrefix(t, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(t), &m) != nil {
			return ""
		}
		switch v := m[key].(type) {
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
		return ""
	}
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if j := strings.Index(v[1:], `"`); j >= 0 {
			return v[1 : j+1]
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}

// publishLatencies are the NodePublishVolume durations the node plugin logged (debug).
func (s *scale) publishLatencies(ctx context.Context, since time.Time) []time.Duration {
	var out []time.Duration
	for _, l := range s.logLines(ctx, driverNS, "app=gcsfuse-csi-node", since) {
		if strings.Contains(l, "csi call") && strings.Contains(l, "NodePublishVolume") && logTime(l).After(since) {
			if ms, err := strconv.Atoi(field(l, "ms")); err == nil {
				out = append(out, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	return out
}

// readyLatencies pair each volume's "descriptor offered" line with its "gcsfuse serving" line
// (all: NodePublishVolume -> serving, which includes the wait for the kubelet to start the
// sidecar container), and read the sidecar's own part from the latter (ms: the sidecar took
// the descriptor -> gcsfuse serving).
func (s *scale) readyLatencies(ctx context.Context, since time.Time) (all, sidecar []time.Duration) {
	offered := map[string]time.Time{}
	var out []time.Duration
	for _, l := range s.logLines(ctx, driverNS, "app=gcsfuse-csi-node", since) {
		key := field(l, "podUID") + "/" + field(l, "volume")
		switch {
		case strings.Contains(l, "descriptor offered to sidecar"):
			offered[key] = logTime(l)
		case strings.Contains(l, `msg="gcsfuse serving"`):
			if t0, ok := offered[key]; ok && t0.After(since) {
				out = append(out, logTime(l).Sub(t0))
				if ms, err := strconv.Atoi(field(l, "ms")); err == nil {
					sidecar = append(sidecar, time.Duration(ms)*time.Millisecond)
				}
			}
		}
	}
	return out, sidecar
}

func (s *scale) admissionLatencies(ctx context.Context, since time.Time) []time.Duration {
	var out []time.Duration
	for _, l := range s.logLines(ctx, driverNS, "app=gcsfuse-webhook", since) {
		if strings.Contains(l, "admission served") && logTime(l).After(since) {
			if us, err := strconv.Atoi(field(l, "us")); err == nil {
				out = append(out, time.Duration(us)*time.Microsecond)
			}
		}
	}
	return out
}

func logTime(line string) time.Time {
	v := field(line, "time")
	if !strings.HasPrefix(strings.TrimSpace(line), "{") {
		v = field(" "+line, "time")
	}
	t, _ := time.Parse(time.RFC3339Nano, v)
	return t
}

func apiServerMetrics(ctx context.Context, cs kubernetes.Interface) (map[string]*dto.MetricFamily, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(raw))
}

// apiServerAdmissionP99 reads the API server's own histogram of our webhook's calls.
func apiServerAdmissionP99(ctx context.Context, cs kubernetes.Interface, before map[string]*dto.MetricFamily) string {
	mfs, err := apiServerMetrics(ctx, cs)
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	return histogramP99(before, mfs, "apiserver_admission_webhook_admission_duration_seconds", map[string]string{"type": "admit"})
}

// histogramP99 is the upper bound of the bucket holding the 99th percentile of the samples
// added between before and after (before nil: all), over the series whose labels include want.
func histogramP99(before, after map[string]*dto.MetricFamily, name string, want map[string]string) string {
	sum := func(mfs map[string]*dto.MetricFamily) (bounds []float64, counts []uint64) {
		if mfs == nil || mfs[name] == nil {
			return nil, nil
		}
	next:
		for _, m := range mfs[name].Metric {
			for _, lp := range m.Label {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			for i, b := range m.GetHistogram().GetBucket() {
				if i >= len(bounds) {
					bounds = append(bounds, b.GetUpperBound())
					counts = append(counts, 0)
				}
				counts[i] += b.GetCumulativeCount()
			}
		}
		return bounds, counts
	}
	bounds, c1 := sum(after)
	_, c0 := sum(before)
	if len(bounds) == 0 {
		return "no samples"
	}
	delta := func(i int) uint64 {
		if i < len(c0) {
			return c1[i] - c0[i]
		}
		return c1[i]
	}
	total := delta(len(bounds) - 1)
	if total == 0 {
		return "no samples"
	}
	for i, b := range bounds {
		if float64(delta(i)) >= 0.99*float64(total) {
			return fmt.Sprintf("%s (n=%d)", time.Duration(b*float64(time.Second)), total)
		}
	}
	return fmt.Sprintf("> %s (n=%d)", time.Duration(bounds[len(bounds)-1]*float64(time.Second)), total)
}

func durations(m map[string]podTimes, f func(podTimes) time.Duration) []time.Duration {
	var out []time.Duration
	for _, p := range m {
		out = append(out, f(p))
	}
	return out
}

func stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	r := func(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }
	return fmt.Sprintf("n=%d p50 %s p90 %s p99 %s max %s", len(s), r(q(0.5)), r(q(0.9)), r(q(0.99)), r(s[len(s)-1]))
}

func mibStats(v []float64) string {
	if len(v) == 0 {
		return "no samples"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	q := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %.1f MiB, p99 %.1f MiB, max %.1f MiB", q(0.5), q(0.99), s[len(s)-1])
}

// ---------------------------------------------------------------------------- processes

// findProcess returns the pid of the first process whose argv[0] ends in name.
func findProcess(name string) int {
	for _, pid := range pids() {
		if argv0(pid) == name {
			return pid
		}
	}
	return 0
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func argv0(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return ""
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return filepath.Base(string(b))
}

func parentPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func statusKiB(pid int, key string) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key+":" {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return 0
}

func vmHWM(pid int) float64 { return statusKiB(pid, "VmHWM") / 1024 }

func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

type peaks struct {
	nodeRSS         float64
	gcsfuse         []float64 // peak RSS of each gcsfuse process, MiB
	sidecar         []float64
	maxGcsfuse      int
	gcsfuseBy       map[int]float64
	sidecarBy       map[int]float64
	stopC, stoppedC chan struct{}
}

// startSampler samples the node plugin's RSS and every gcsfuse and sidecar process's RSS
// until stop.
func startSampler(nodePID int) *peaks {
	p := &peaks{gcsfuseBy: map[int]float64{}, sidecarBy: map[int]float64{}, stopC: make(chan struct{}), stoppedC: make(chan struct{})}
	go func() { // owned by the run: ends at stop
		defer close(p.stoppedC)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			p.nodeRSS = max(p.nodeRSS, statusKiB(nodePID, "VmRSS")/1024)
			n := 0
			for _, pid := range pids() {
				switch argv0(pid) {
				case "gcsfuse":
					if argv0(parentPID(pid)) != "gcsfuse-sidecar" {
						continue // not a pod's (another session's test, perhaps)
					}
					n++
					p.gcsfuseBy[pid] = max(p.gcsfuseBy[pid], statusKiB(pid, "VmRSS")/1024)
				case "gcsfuse-sidecar":
					p.sidecarBy[pid] = max(p.sidecarBy[pid], statusKiB(pid, "VmRSS")/1024)
				}
			}
			p.maxGcsfuse = max(p.maxGcsfuse, n)
			select {
			case <-p.stopC:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peaks) stop() *peaks {
	close(p.stopC)
	<-p.stoppedC
	for _, v := range p.gcsfuseBy {
		if v > 0 {
			p.gcsfuse = append(p.gcsfuse, v)
		}
	}
	for _, v := range p.sidecarBy {
		if v > 0 {
			p.sidecar = append(p.sidecar, v)
		}
	}
	return p
}

// ---------------------------------------------------------------------------- leaks

type leaks struct{ mounts, procs, sockets, exitFiles int }

func (l leaks) total() int { return l.mounts + l.procs + l.sockets + l.exitFiles }

// waitNoLeaks counts what the storm left, waiting (bounded) for the kubelet's cleanup.
func (s *scale) waitNoLeaks() leaks {
	var l leaks
	for end := time.Now().Add(leakWait); ; time.Sleep(time.Second) {
		l = s.countLeaks()
		if l.total() == 0 || time.Now().After(end) {
			return l
		}
	}
}

// countLeaks counts, for the storm's pods only (other pods and other sessions' mounts on
// this machine are not ours to count): FUSE mounts of this driver under their directories,
// gcsfuse processes of any sidecar (none may be left: the storm was the cluster's only
// workload), and sockets and exit files in their gcsfuse-tmp emptyDirs.
func (s *scale) countLeaks() leaks {
	var l leaks
	s.mu.Lock()
	uids := slices.Clone(s.uids)
	s.mu.Unlock()
	ours := func(path string) bool {
		for _, u := range uids {
			if strings.HasPrefix(path, filepath.Join(s.kubeletRoot, "pods", u)+"/") {
				return true
			}
		}
		return false
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 4 && strings.Contains(sc.Text(), " - "+fusemount.FSType+" ") && ours(fs[4]) {
				l.mounts++
			}
		}
		f.Close()
	}
	for _, pid := range pids() {
		if argv0(pid) == "gcsfuse" && argv0(parentPID(pid)) == "gcsfuse-sidecar" {
			l.procs++
		}
	}
	var dirs []string
	for _, u := range uids {
		dirs = append(dirs, filepath.Join(s.kubeletRoot, "pods", u, "volumes", "kubernetes.io~empty-dir", contract.TmpVolumeName))
	}
	for _, d := range dirs {
		socks, _ := filepath.Glob(filepath.Join(d, contract.HandoffDir, "*"+contract.HandoffSocketSuffix))
		l.sockets += len(socks)
		if _, err := os.Lstat(filepath.Join(d, contract.MetricsSocket)); err == nil {
			l.sockets++
		}
		if _, err := os.Lstat(filepath.Join(d, contract.ExitFile)); err == nil {
			l.exitFiles++
		}
	}
	return l
}
