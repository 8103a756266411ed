// Command scale takes the local cluster's node to the kubelet's limits (hack/scale.sh brings
// the cluster up) and prints what the driver costs there, then checks that nothing leaked.
//
// It fills the node: N pods (default: the node's allocatable pods, which is the kubelet's
// maxPods, minus the pods already running on it: the node plugin, the webhook's replicas, the
// emulator), half of them with two gcsfuse volumes and half with one, each writing a little to
// each volume and exiting. The burst and the waves run twice, once with the volumes and once
// as a twin whose pods are the same but for emptyDirs in the volumes' place, so that the
// sidecar's share of a pod's start and exit is the difference of two figures taken minutes
// apart in one run:
//
//   - burst: the N pods created at once (createWorkers Create calls at a time);
//   - waves: the N pods in waves of -wave pods, -wave-gap apart (0: skipped);
//   - soak: -jobs Jobs of one pod each (restartPolicy Never, one volume, a small write), run
//     back to back -jobs-parallel at a time (0: skipped).
//
// Before any of it, a burst of N opted-in pods that no node takes measures admission alone.
// Every pod and Job must succeed and every object it wrote must be in the emulator with its
// bytes (size and MD5 of the workload's pattern). Once everything is gone and the node has
// settled (bounded), it compares what the node held before the first pod with what it holds
// after: the driver's mounts, gcsfuse and sidecar processes, hand-off and metrics sockets,
// exit files, pending offer records, pod directories, the node plugin's goroutines, open fds
// and published volumes, and inotify instances per uid. It prints tables of figures
// (n, p50, p90, p99, max; no goals asserted: the figures are for the README) and exits 1 when
// something leaked or was lost, listing what. With -markdown FILE it also writes them as the
// README's generated block (internal/readmegen), for go run ./hack/readme to splice.
//
// It measures from this host (the cluster's processes are this machine's, and share its
// clock) and from the components' own logs and metrics; the node plugin's RSS and CPU also
// from a real Prometheus scraping it with the documented scrape job (-prometheus,
// internal/testing/promrun), beside this host's own samples. Every connection it opens goes to the
// API server, the emulator or that Prometheus, all on the cluster's veth (dialguard refuses
// any other address, and no proxy is used); every loop and wait is bounded in count or time.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dialguard"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/promrun"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/quantile"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

const (
	driverNS = "gcsfuse-csi"
	// metricsPort is the node plugin's metrics port (chart value node.metricsPort). The node
	// plugin is on the pod network (not hostNetwork): it is scraped through the API server's
	// pod proxy, which keeps this program's connections to the API server alone.
	metricsPort     = "9920"
	nodePluginLabel = "app=gcsfuse-csi-node"
	webhookLabel    = "app=gcsfuse-webhook"

	// Process names (argv[0]'s base) on this machine.
	nodePluginCommand = "gcsfuse-csi-node"
	sidecarCommand    = "gcsfuse-sidecar"
	gcsfuseCommand    = "gcsfuse"

	// runLabel is on every pod and Job this program creates, with the run's name as value
	// (jobRun for the soak's Jobs and their pods): a run waits for its own, cleanup takes all.
	runLabel = "gcsfuse-csi.scale/run"
	jobRun   = "soak"

	// The sidecar's resources, by annotation, sized so that a node full of pods fits: the
	// webhook's defaults (100m CPU, 128Mi memory, 5Gi ephemeral storage requested) ask for 25
	// cores, 31 GiB and 1.2 TiB at 250 pods on a node with 2 cores, 24 GB and 252 GB. Requests
	// only place pods. The memory limit is the default's, set explicitly: a request given
	// alone is copied to the limit, and 32Mi would OOM-kill a two-volume sidecar (~100 MiB).
	// No CPU limit ("0"), as the webhook's default; ephemeral storage "0": neither request
	// nor limit.
	sidecarCPURequest    = "5m"
	sidecarMemoryRequest = "32Mi"
	sidecarMemoryLimit   = "1Gi"

	// createWorkers is how many Create calls (and log reads) run at once; the client's QPS
	// limit (apiQPS) applies on top.
	createWorkers = 25
	apiQPS        = 100
	apiBurst      = 200

	// sampleEvery is how often process memory is sampled during a run.
	sampleEvery = 200 * time.Millisecond
	// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat (100 on Linux).
	clockTicks = 100

	// goroutineTolerance is how many more goroutines the node plugin may have after the runs
	// than before without it counting as a leak: its count moves by a few with things that
	// are not pods (the metrics server's goroutine per kept-alive connection of the API
	// server's proxy, the gRPC server's per-connection goroutines while the kubelet calls it,
	// the runtime event stream's reconnects), while a per-pod or per-volume leak after the
	// runs' thousands of volumes would show as hundreds.
	goroutineTolerance = 5
	// settlePoll is how often the leak snapshot is retaken while the node settles.
	settlePoll = 2 * time.Second
	// maxLeakDetail bounds how many leaked items are listed per kind, maxLossesShown how many
	// losses (a soak that goes wrong can lose a thousand Jobs the same way).
	maxLeakDetail  = 20
	maxLossesShown = 50

	// deleteWait bounds the wait for deleted pods (or Jobs) to be gone; deletePoll is its
	// polling period.
	deleteWait = 5 * time.Minute
	deletePoll = 500 * time.Millisecond
	// namespaceWait bounds the wait for a new namespace's service account and root CA.
	namespaceWait = 30 * time.Second
	// jobWait bounds the wait for one Job to complete, within the soak's own bound.
	jobWait = 10 * time.Minute

	// maxWatchRestarts bounds how many times a watch is re-established (the API server ends
	// watches after 30-60 min and on compactions); watchRetryDelay spaces failed attempts.
	maxWatchRestarts = 100
	watchRetryDelay  = time.Second

	// logPollEvery is how often the components' logs are read during a phase: the kubelet
	// rotates a container's log at 10 MiB and serves only the current file, and the node
	// plugin at -v over a 1,000-Job soak would outgrow that. logOverlap re-reads a little
	// before the last read (lines are deduplicated), for timestamps at the boundary.
	logPollEvery = 30 * time.Second
	logOverlap   = 2 * time.Second

	// objectCheckers is how many object lookups run at once against the emulator.
	objectCheckers = 8
	// httpTimeout bounds one request to the emulator; callTimeout one to the API server
	// outside a run's own bound (scrapes, log reads, deletes).
	httpTimeout = 10 * time.Second
	callTimeout = 20 * time.Second
)

func main() { os.Exit(run()) }

// options are the flags (hack/scale.sh sets them from its SCALE_* environment).
type options struct {
	kubeconfig, gcsURL, kubeletRoot, workloadImage string
	// prometheus, netns and promListen run Prometheus (promrun.Config).
	prometheus, netns, promListen, scrapeConfig string
	// n is the pods per run; 0 fills the node.
	n, size                  int
	wave                     int
	waveGap                  time.Duration
	jobs, jobsParallel, jobB int
	timeout, soakTimeout     time.Duration
	settle                   time.Duration
	// markdown is -markdown: a file for the README's generated block, or "".
	markdown string
	// sharedPods and sharedBytes are the shared mount mode's phase (shared.go; 0: skipped).
	sharedPods, sharedBytes int
}

// Bounds of the flags: they keep a typo from asking for a run that cannot end.
const (
	maxPodsPerRun = 1000
	maxBytes      = 64 << 20
	maxJobs       = 100000
	maxParallel   = 200
	maxGap        = 10 * time.Minute
	maxTimeout    = 6 * time.Hour
	maxSettle     = 30 * time.Minute
)

func (o options) validate() error {
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(o.kubeconfig != "", "-kubeconfig is required")
	check(o.n >= 0 && o.n <= maxPodsPerRun, "-n %d: want 0 (fill the node) to %d", o.n, maxPodsPerRun)
	check(o.size >= 1 && o.size <= maxBytes, "-bytes %d: want 1 to %d", o.size, maxBytes)
	check(o.wave >= 0 && o.wave <= maxPodsPerRun, "-wave %d: want 0 (no wave run) to %d", o.wave, maxPodsPerRun)
	check(o.waveGap >= 0 && o.waveGap <= maxGap, "-wave-gap %s: want 0 to %s", o.waveGap, maxGap)
	check(o.jobs >= 0 && o.jobs <= maxJobs, "-jobs %d: want 0 (no soak) to %d", o.jobs, maxJobs)
	check(o.jobsParallel >= 1 && o.jobsParallel <= maxParallel, "-jobs-parallel %d: want 1 to %d", o.jobsParallel, maxParallel)
	check(o.jobB >= 1 && o.jobB <= maxBytes, "-job-bytes %d: want 1 to %d", o.jobB, maxBytes)
	check(o.timeout >= time.Minute && o.timeout <= maxTimeout, "-timeout %s: want 1m to %s", o.timeout, maxTimeout)
	check(o.soakTimeout >= time.Minute && o.soakTimeout <= maxTimeout, "-soak-timeout %s: want 1m to %s", o.soakTimeout, maxTimeout)
	check(o.settle >= 0 && o.settle <= maxSettle, "-settle %s: want 0 to %s", o.settle, maxSettle)
	check(o.sharedPods == 0 || o.sharedPods >= 2 && o.sharedPods <= maxPodsPerRun, "-shared-pods %d: want 0 (no shared phase) or 2 to %d", o.sharedPods, maxPodsPerRun)
	check(o.sharedBytes >= 1 && o.sharedBytes <= maxBytes, "-shared-bytes %d: want 1 to %d", o.sharedBytes, maxBytes)
	check(filepath.IsAbs(o.kubeletRoot), "-kubelet-root %q: want an absolute path", o.kubeletRoot)
	check(o.workloadImage != "", "-workload-image is required")
	check(o.prometheus != "" && o.netns != "" && o.scrapeConfig != "", "-prometheus, -netns and -scrape-config are required")
	if _, _, err := net.SplitHostPort(o.promListen); err != nil {
		errs = append(errs, fmt.Errorf("-prometheus-listen %q: %w", o.promListen, err))
	}
	if u, err := url.Parse(o.gcsURL); err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		errs = append(errs, fmt.Errorf("-gcs-url %q: want http://host:port", o.gcsURL))
	}
	return errors.Join(errs...)
}

// overhead bounds what the phases' own bounds do not cover: the admission burst, the log
// reads, the object checks and the snapshots.
const overhead = 15 * time.Minute

// bound is the whole program's: every phase's own bound (each run's -timeout and the
// deletion after it, the soak's -soak-timeout, -settle) plus overhead. Calls that have no
// bound of their own end with it.
func (o options) bound() time.Duration {
	runs := 2 // the burst, with volumes and its twin
	if o.wave > 0 {
		runs += 2
	}
	shared := time.Duration(0)
	if o.sharedPods > 0 {
		shared = 3*sharedRunning + 2*sharedMetricsWait + 2*deleteWait
	}
	return time.Duration(runs)*(o.timeout+deleteWait) + o.soakTimeout + deleteWait + o.settle + shared + overhead
}

func run() int {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the local cluster")
	flag.IntVar(&o.n, "n", 0, "pods per run (half with two volumes, half with one); 0 fills the node: its allocatable pods (maxPods) minus the pods already on it")
	flag.IntVar(&o.size, "bytes", 64<<10, "bytes each run's pod writes to each of its volumes")
	flag.IntVar(&o.wave, "wave", 25, "pods per wave of the wave run; 0 skips it")
	flag.DurationVar(&o.waveGap, "wave-gap", 5*time.Second, "pause between one wave's creation and the next's")
	flag.IntVar(&o.jobs, "jobs", 1000, "Jobs of the soak, one pod each; 0 skips it")
	flag.IntVar(&o.jobsParallel, "jobs-parallel", 20, "Jobs of the soak at a time")
	flag.IntVar(&o.jobB, "job-bytes", 4096, "bytes each Job writes to its volume")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "bound of each run (burst or waves, with or without volumes)")
	flag.DurationVar(&o.soakTimeout, "soak-timeout", 90*time.Minute, "bound of the Job soak")
	flag.DurationVar(&o.settle, "settle", 2*time.Minute, "bound of the wait for the node to settle before the leaks are counted")
	flag.StringVar(&o.gcsURL, "gcs-url", "http://10.241.0.2:14443", "the emulator as this host reaches it")
	flag.StringVar(&o.kubeletRoot, "kubelet-root", "/var/lib/kubelet", "the kubelet's root directory on this host")
	flag.StringVar(&o.workloadImage, "workload-image", "gcsfuse-csi.local/workload:e2e", "the e2e workload image ($IMAGE_REPO/workload:$IMAGE_TAG)")
	flag.StringVar(&o.prometheus, "prometheus", "/usr/bin/prometheus", "the Prometheus binary that scrapes the node plugin")
	flag.StringVar(&o.netns, "netns", "/run/netns/gcsfuse-csi", "the cluster's network namespace, where Prometheus runs")
	flag.StringVar(&o.promListen, "prometheus-listen", "10.241.0.2:19091", "Prometheus' listen address, in that namespace")
	flag.StringVar(&o.scrapeConfig, "scrape-config", "deploy/monitoring/prometheus-scrape.yaml", "the documented scrape job")
	flag.IntVar(&o.sharedPods, "shared-pods", 50, "pods of the shared mount mode's phase (one key, each reading one object through a file cache, then staying); 0 skips it")
	flag.IntVar(&o.sharedBytes, "shared-bytes", 8<<20, "size of the object the shared phase's pods read")
	flag.StringVar(&o.markdown, "markdown", "", "also write the figures as docs/performance.md's generated block to this file (go run ./hack/readme -file docs/performance.md < FILE); hack/scale.sh passes SCALE_MARKDOWN")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "scale: unexpected arguments %q\n", flag.Args())
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 2
	}
	cfg, guard, err := dialguard.ClientConfig(o.kubeconfig, apiQPS, apiBurst, o.gcsURL, "http://"+o.promListen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	s := &scale{
		cs: kubernetes.NewForConfigOrDie(cfg), opts: o, dial: guard.DialContext,
		gcs: &http.Client{Timeout: httpTimeout, Transport: &http.Transport{Proxy: nil, DialContext: guard.DialContext}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.bound())
	defer cancel()
	rep, err := s.main(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	if o.markdown != "" {
		if err := writeMarkdown(o.markdown, rep); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			return 1
		}
	}
	if len(rep.leaks) > 0 || len(rep.losses) > 0 {
		fmt.Println("\nscale: FAILED")
		for _, l := range rep.leaks {
			fmt.Println("  leak:", l)
		}
		for _, l := range rep.losses[:min(len(rep.losses), maxLossesShown)] {
			fmt.Println("  loss:", l)
		}
		if len(rep.losses) > maxLossesShown {
			fmt.Printf("  and %d more losses\n", len(rep.losses)-maxLossesShown)
		}
		return 1
	}
	fmt.Println("\n" + verdictOK)
	return 0
}

// verdictOK ends a run where every pod and Job succeeded and nothing leaked.
const verdictOK = "scale: every pod and Job succeeded with its bytes; nothing leaked"

// blockName and blockBy are the README's generated block of this program ("A node full of
// pods") and the command that rewrites it.
const (
	blockName = "scale"
	blockBy   = "SCALE_MARKDOWN=FILE hack/scale.sh"
)

// markdownBlock is the README's block of a run: its setting, the three tables and the
// verdict.
func markdownBlock(rep *report) (readmegen.Block, error) {
	verdict := verdictOK
	if len(rep.leaks) > 0 || len(rep.losses) > 0 {
		verdict = fmt.Sprintf("scale: FAILED: %d leaks, %d losses (listed in the run's output)", len(rep.leaks), len(rep.losses))
	}
	return readmegen.New(blockName, blockBy, rep.setting+".\n"+rep.tables+"\n"+verdict)
}

func writeMarkdown(file string, rep *report) error {
	b, err := markdownBlock(rep)
	if err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := readmegen.Write(f, b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ---------------------------------------------------------------------------- network

// ---------------------------------------------------------------------------- the run

type scale struct {
	cs  kubernetes.Interface
	gcs *http.Client
	// dial is the guarded dialer every client uses; prom the Prometheus scraping the node
	// plugin (set once the node plugin is found).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	prom *promrun.Server
	opts options
	ns   string
	// n is the pods per run (opts.n, or the node's free pod slots).
	n       int
	buckets []string
}

// report is what ends the program: leaks and losses are listed and make it exit 1. setting
// and tables are the figures (the run's setting and the Markdown tables), for -markdown too.
type report struct {
	leaks, losses   []string
	setting, tables string
}

func (r *report) lose(format string, a ...any) {
	r.losses = append(r.losses, fmt.Sprintf(format, a...))
}

func (s *scale) main(ctx context.Context) (*report, error) {
	rep := &report{}
	node, onNode, err := s.node(ctx)
	if err != nil {
		return nil, err
	}
	allocatable := node.Status.Allocatable.Pods().Value()
	free, err := fillCount(allocatable, len(onNode))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w (pods on it: %s)", node.Name, err, strings.Join(onNode, ", "))
	}
	s.n = free
	if s.opts.n > 0 {
		if s.opts.n > free {
			return nil, fmt.Errorf("-n %d: node %s has %d free pod slots (allocatable %d, %d pods on it: %s); pods beyond them would queue, not run",
				s.opts.n, node.Name, free, allocatable, len(onNode), strings.Join(onNode, ", "))
		}
		s.n = s.opts.n
	}
	fmt.Printf("scale: node %s: allocatable pods (the kubelet's maxPods) %d, %d already on it (%s): %d free; %d pods per run (%d with two volumes, %d with one)\n",
		node.Name, allocatable, len(onNode), strings.Join(onNode, ", "), free, s.n, twoVolumePods(s.n), s.n-twoVolumePods(s.n))

	s.ns = fmt.Sprintf("scale-%d", rand.IntN(1e6))
	if _, err := s.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_ = s.cs.CoreV1().Namespaces().Delete(c, s.ns, metav1.DeleteOptions{})
	}()
	if err := s.waitNamespaceReady(ctx); err != nil {
		return nil, err
	}
	s.buckets = []string{fmt.Sprintf("scale-a-%d", rand.IntN(1e6)), fmt.Sprintf("scale-b-%d", rand.IntN(1e6))}
	for _, b := range s.buckets {
		if err := s.createBucket(ctx, b); err != nil {
			return nil, err
		}
	}
	fmt.Printf("scale: namespace %s, buckets %v, %d bytes per volume; waves of %d (0: none) %s apart; soak of %d Jobs (%d at a time, %d bytes each)\n",
		s.ns, s.buckets, s.opts.size, s.opts.wave, s.opts.waveGap, s.opts.jobs, s.opts.jobsParallel, s.opts.jobB)

	np, err := s.nodePlugin(ctx)
	if err != nil {
		return nil, err
	}
	stopProm, err := s.startPrometheus(ctx)
	if err != nil {
		return nil, err
	}
	defer stopProm()
	before, err := s.snapshot(ctx, np)
	if err != nil {
		return nil, fmt.Errorf("leak snapshot before the runs: %w", err)
	}

	t0 := time.Now()
	fmt.Printf("scale: [%s] admission burst: %d opted-in pods that no node takes\n", since(t0), s.n)
	burst, err := s.admissionBurst(ctx)
	if err != nil {
		return nil, err
	}
	modes := []runSpec{{name: "burst"}}
	if s.opts.wave > 0 {
		modes = append(modes, runSpec{name: "waves", wave: s.opts.wave, gap: s.opts.waveGap})
	}
	var runs []pairedRun
	for _, m := range modes {
		var pr pairedRun
		for _, volumes := range []bool{false, true} {
			spec := m
			spec.volumes = volumes
			fmt.Printf("scale: [%s] %s\n", since(t0), spec.describe(s.n))
			r, err := s.runPods(ctx, np, spec)
			if err != nil {
				return nil, err
			}
			r.report(rep)
			if volumes {
				pr.vol = r
			} else {
				pr.twin = r
			}
		}
		runs = append(runs, pr)
	}
	var soak *soakResult
	if s.opts.jobs > 0 {
		fmt.Printf("scale: [%s] soak: %d Jobs, %d at a time\n", since(t0), s.opts.jobs, s.opts.jobsParallel)
		soak, err = s.soak(ctx, np)
		if err != nil {
			return nil, err
		}
		soak.report(rep)
	}
	var shared *sharedResult
	if s.opts.sharedPods > 0 {
		fmt.Printf("scale: [%s] shared mount mode: %d pods of one key, and their twin\n", since(t0), s.opts.sharedPods)
		shared, err = s.sharedPhase(ctx)
		if err != nil {
			return nil, err
		}
		shared.report(rep)
	}
	fmt.Printf("scale: [%s] runs done; everything deleted; the node settles (at most %s) before the leaks are counted\n", since(t0), s.opts.settle)
	if err := s.deleteAll(ctx); err != nil {
		return nil, err
	}
	leaks, settled, err := s.settle(ctx, np, before)
	if err != nil {
		return nil, err
	}
	np2, err := s.nodePlugin(ctx)
	switch {
	case err != nil:
		rep.lose("node plugin after the runs: %v", err)
	case np2.pid != np.pid || np2.restarts != np.restarts:
		rep.lose("node plugin restarted during the runs (pid %d -> %d, restarts %d -> %d): its goroutine and fd counts compare two processes", np.pid, np2.pid, np.restarts, np2.restarts)
	}
	for _, l := range leaks {
		if l.leaked() {
			rep.leaks = append(rep.leaks, l.String())
		}
	}

	total := since(t0)
	rep.setting = fmt.Sprintf("maxPods %d, %d pods already on it -> %d pods per run (%d with two volumes, %d with one), %d bytes per volume; twin: the same pods with emptyDirs for volumes; total %s",
		allocatable, len(onNode), s.n, twoVolumePods(s.n), s.n-twoVolumePods(s.n), s.opts.size, total)
	var tables strings.Builder
	printLatencies(&tables, burst, runs, soak)
	printFigures(&tables, runs, soak)
	if shared != nil {
		shared.print(&tables)
	}
	printLeaks(&tables, leaks, settled)
	rep.tables = tables.String()
	fmt.Printf("\n=== scale: node %s, %s\n", node.Name, rep.setting)
	fmt.Print(rep.tables)
	for _, l := range leaks {
		if l.leaked() {
			fmt.Println("leaked:", l)
		}
	}
	return rep, nil
}

func since(t time.Time) string { return time.Since(t).Round(time.Second).String() }

// node returns the cluster's only node and the pods already on it (not terminated: the kubelet
// and the scheduler count only those against maxPods), as namespace/name.
func (s *scale) node(ctx context.Context) (*corev1.Node, []string, error) {
	nodes, err := s.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	if len(nodes.Items) != 1 {
		return nil, nil, fmt.Errorf("%d nodes: filling the node needs the local single-node cluster", len(nodes.Items))
	}
	node := &nodes.Items[0]
	pods, err := s.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		return nil, nil, err
	}
	return node, activeOn(pods.Items, node.Name), nil
}

// activeOn lists, as namespace/name, the pods bound to node that are not terminated.
func activeOn(pods []corev1.Pod, node string) []string {
	var out []string
	for _, p := range pods {
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p.Namespace+"/"+p.Name)
	}
	slices.Sort(out)
	return out
}

// fillCount is how many pods fill a node of allocatable pods on which active pods run. It
// needs room for at least one.
func fillCount(allocatable int64, active int) (int, error) {
	if allocatable <= 0 {
		return 0, fmt.Errorf("allocatable pods %d: the node reports no pod capacity", allocatable)
	}
	free := allocatable - int64(active)
	if free < 1 {
		return 0, fmt.Errorf("no free pod slot: allocatable %d, %d pods on the node", allocatable, active)
	}
	return int(free), nil
}

// twoVolumePods is how many of a run's n pods have two volumes (the even-numbered ones: half,
// rounded up); the others have one.
func twoVolumePods(n int) int { return (n + 1) / 2 }

// volumesOf is the number of volumes of a run's pod i.
func volumesOf(i int) int {
	if i%2 == 0 {
		return 2
	}
	return 1
}

func (s *scale) waitNamespaceReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, namespaceWait)
	defer cancel()
	for ctx.Err() == nil {
		_, errSA := s.cs.CoreV1().ServiceAccounts(s.ns).Get(ctx, "default", metav1.GetOptions{})
		_, errCM := s.cs.CoreV1().ConfigMaps(s.ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if errSA == nil && errCM == nil {
			return nil
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("namespace %s: no default service account after %s", s.ns, namespaceWait)
}

func (s *scale) createBucket(ctx context.Context, name string) error {
	body, _ := json.Marshal(map[string]string{"name": name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.gcsURL+"/storage/v1/b?project=scale", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.gcs.Do(req)
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

// sidecarAnnotations opt a pod in, with the resources a full node has room for.
func sidecarAnnotations() map[string]string {
	return map[string]string{
		contract.AnnotationInject:     "true",
		contract.AnnotationCPURequest: sidecarCPURequest, contract.AnnotationCPULimit: "0",
		contract.AnnotationMemoryRequest: sidecarMemoryRequest, contract.AnnotationMemoryLimit: sidecarMemoryLimit,
		contract.AnnotationEphemeralStorageRequest: "0",
	}
}

// volumeNames name a pod's volumes and their mount paths ("/a", "/b").
var volumeNames = []string{"a", "b"}

// workloadSpec is the spec of one writer pod: vols volumes (1 or 2), the gcsfuse volume of
// buckets[i] each when buckets is set, else emptyDirs in their place (the twin); the app
// writes size bytes to object in each and exits.
func (s *scale) workloadSpec(object string, vols int, buckets []string, size int) corev1.PodSpec {
	args := []string{"write", "-dir", "/a", "-name", object, "-bytes", strconv.Itoa(size)}
	if vols == 2 {
		args = append(args, "-also", "/b")
	}
	spec := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  new(false),
		TerminationGracePeriodSeconds: new(int64(5)),
		Containers: []corev1.Container{{
			Name: "app", Image: s.opts.workloadImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/workload"}, Args: args,
		}},
	}
	for i, v := range volumeNames[:vols] {
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/" + v})
		src := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		if buckets != nil {
			src = corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver: contract.DriverName, VolumeAttributes: map[string]string{contract.AttrBucketName: buckets[i]},
			}}
		}
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: v, VolumeSource: src})
	}
	return spec
}

// pod is a run's pod i.
func (s *scale) pod(run, name string, i int, volumes bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: map[string]string{runLabel: run}}}
	var buckets []string
	if volumes {
		buckets = s.buckets
		p.Annotations = sidecarAnnotations()
	}
	p.Spec = s.workloadSpec(name+".bin", volumesOf(i), buckets, s.opts.size)
	return p
}

// ---------------------------------------------------------------------------- watching

// lister lists the objects of one kind and label and watches them from a list's version.
type lister struct {
	list  func(ctx context.Context) ([]runtime.Object, string, error)
	watch func(ctx context.Context, rv string) (watch.Interface, error)
}

func (s *scale) podLister(selector string) lister {
	return listerOf(selector,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.cs.CoreV1().Pods(s.ns).List(ctx, o)
		}, s.cs.CoreV1().Pods(s.ns).Watch)
}

func (s *scale) jobLister(selector string) lister {
	return listerOf(selector,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.cs.BatchV1().Jobs(s.ns).List(ctx, o)
		}, s.cs.BatchV1().Jobs(s.ns).Watch)
}

// listerOf is the lister of one typed client's list and watch, for the objects with the
// label selector: the items and version of any list kind (meta.ExtractList).
func listerOf(selector string, list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) lister {
	return lister{
		list: func(ctx context.Context) ([]runtime.Object, string, error) {
			l, err := list(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return nil, "", err
			}
			items, err := meta.ExtractList(l)
			if err != nil {
				return nil, "", err
			}
			acc, err := meta.ListAccessor(l)
			if err != nil {
				return nil, "", err
			}
			return items, acc.GetResourceVersion(), nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return watchFn(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
		},
	}
}

// follow hands every object that l's list and watch yield (not deletions) to on, on this
// goroutine, until ctx ends. The API server ends watches (every 30-60 min, and with 410 Gone
// after a compaction): it lists and watches again, at most maxWatchRestarts times.
func follow(ctx context.Context, l lister, on func(runtime.Object)) {
	for range maxWatchRestarts {
		if ctx.Err() != nil {
			return
		}
		items, rv, err := l.list(ctx)
		if err != nil {
			sleep(ctx, watchRetryDelay)
			continue
		}
		for _, o := range items {
			on(o)
		}
		w, err := l.watch(ctx, rv)
		if err != nil {
			sleep(ctx, watchRetryDelay)
			continue
		}
	events: // until the watch ends, or ctx does (a watch need not close its channel then)
		for {
			select {
			case <-ctx.Done():
				break events
			case ev, ok := <-w.ResultChan():
				if !ok || ev.Type == watch.Error {
					break events
				}
				if ev.Type != watch.Deleted {
					on(ev.Object)
				}
			}
		}
		w.Stop()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ---------------------------------------------------------------------------- pod runs

// runSpec is one run of s.n pods.
type runSpec struct {
	name    string // "burst" or "waves"
	volumes bool
	// wave is the pods per wave (0: all at once), gap the pause after each wave's creation.
	wave int
	gap  time.Duration
}

func (r runSpec) id() string {
	if r.volumes {
		return r.name + "-vol"
	}
	return r.name + "-twin"
}

func (r runSpec) describe(n int) string {
	what := "twin (emptyDirs for volumes)"
	if r.volumes {
		what = "gcsfuse volumes"
	}
	if r.wave == 0 {
		return fmt.Sprintf("%s: %d pods at once, %s", r.name, n, what)
	}
	return fmt.Sprintf("%s: %d pods in waves of %d, %s apart, %s", r.name, n, r.wave, r.gap, what)
}

// podTimes are one pod's moments, on this machine's clock (the containers share it).
type podTimes struct {
	created, appStart, appExit, done time.Time
	// createCall is how long the Create call took (admission included).
	createCall time.Duration
}

// runResult is one run's outcome and figures.
type runResult struct {
	spec runSpec
	n    int
	// pods are the pods that succeeded, by name, with their moments.
	pods map[string]podTimes
	// lost lists the pods that did not succeed (or whose moments are missing), with why.
	lost []string
	// objects is the check of every succeeded volume pod's objects in the emulator.
	objects objectCheck
	m       measured
}

func (r *runResult) report(rep *report) {
	for _, l := range r.lost {
		rep.lose("%s: %s", r.spec.id(), l)
	}
	for _, b := range r.objects.bad {
		rep.lose("%s: object %s", r.spec.id(), b)
	}
	fmt.Printf("scale:   %d/%d pods Succeeded", len(r.pods), r.n)
	if r.spec.volumes {
		fmt.Printf(", %d/%d objects with their bytes", r.objects.ok, r.objects.want)
	}
	fmt.Printf(" (node plugin CPU %.2f s, peak RSS %.1f MiB)\n", r.m.cpu, r.m.peaks.nodeRSS)
}

// podState follows a run's pods (those labelled run): when each became terminal (on this
// machine's clock) and, for those that failed, why.
type podState struct {
	run      string
	mu       sync.Mutex
	terminal map[string]time.Time
	failed   map[string]string
	changed  chan struct{}
}

func newPodState(run string) *podState {
	return &podState{run: run, terminal: map[string]time.Time{}, failed: map[string]string{}, changed: make(chan struct{}, 1)}
}

func (st *podState) see(o runtime.Object) {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Labels[runLabel] != st.run || (p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed) {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, seen := st.terminal[p.Name]; seen {
		return
	}
	st.terminal[p.Name] = time.Now()
	if p.Status.Phase == corev1.PodFailed {
		st.failed[p.Name] = podFailure(p)
	}
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

func (st *podState) count() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.terminal)
}

// podFailure says why a pod failed: its message and its containers' non-zero exits.
func podFailure(p *corev1.Pod) string {
	parts := []string{"Failed"}
	if p.Status.Reason != "" || p.Status.Message != "" {
		parts = append(parts, strings.TrimSpace(p.Status.Reason+" "+p.Status.Message))
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			parts = append(parts, fmt.Sprintf("container %s exited %d (%s)", cs.Name, t.ExitCode, t.Reason))
		}
	}
	return strings.Join(parts, "; ")
}

// runPods creates s.n pods as spec says, waits (bounded by -timeout) until every one is
// terminal, reads the app's moments from its log, checks the objects of the volume pods, and
// deletes the pods.
func (s *scale) runPods(ctx context.Context, np nodePlugin, spec runSpec) (*runResult, error) {
	r := &runResult{spec: spec, n: s.n, pods: map[string]podTimes{}}
	rctx, cancel := context.WithTimeout(ctx, s.opts.timeout)
	defer cancel()
	st := newPodState(spec.id())
	wctx, stopWatch := context.WithCancel(rctx)
	watched := make(chan struct{})
	go func() { // ends with wctx
		defer close(watched)
		follow(wctx, s.podLister(runLabel+"="+spec.id()), st.see)
	}()
	defer func() { stopWatch(); <-watched }()

	var mu sync.Mutex
	var created atomic.Int64
	m, err := s.measure(ctx, np, func() error {
		create := func(i int) error {
			name := fmt.Sprintf("%s-%03d", spec.id(), i)
			t0 := time.Now()
			if _, err := s.cs.CoreV1().Pods(s.ns).Create(rctx, s.pod(spec.id(), name, i, spec.volumes), metav1.CreateOptions{}); err != nil {
				mu.Lock()
				r.lost = append(r.lost, fmt.Sprintf("pod %s: create: %v", name, err))
				mu.Unlock()
				return nil // the others still run
			}
			created.Add(1)
			mu.Lock()
			r.pods[name] = podTimes{created: t0, createCall: time.Since(t0)}
			mu.Unlock()
			return nil
		}
		for _, w := range waves(s.n, spec.wave) {
			_ = inParallel(w.count, func(i int) error { return create(w.first + i) })
			if w.first+w.count < s.n && spec.gap > 0 {
				sleep(rctx, spec.gap)
			}
		}
		for st.count() < int(created.Load()) {
			select {
			case <-st.changed:
			case <-rctx.Done():
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.m = m
	st.mu.Lock()
	for name := range r.pods {
		done, terminal := st.terminal[name]
		switch why, failed := st.failed[name]; {
		case !terminal:
			r.lost = append(r.lost, fmt.Sprintf("pod %s: not done within %s", name, s.opts.timeout))
			delete(r.pods, name)
		case failed:
			r.lost = append(r.lost, fmt.Sprintf("pod %s: %s", name, why))
			delete(r.pods, name)
		default:
			pt := r.pods[name]
			pt.done = done
			r.pods[name] = pt
		}
	}
	st.mu.Unlock()

	// The app's own START/EXIT lines (ms): the kubelet's timestamps have 1 s resolution.
	names := slices.Sorted(maps.Keys(r.pods))
	_ = inParallel(len(names), func(i int) error {
		c, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		start, exit, err := s.appMoments(c, names[i])
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			r.lost = append(r.lost, fmt.Sprintf("pod %s: %v", names[i], err))
			delete(r.pods, names[i])
			return nil
		}
		pt := r.pods[names[i]]
		pt.appStart, pt.appExit = start, exit
		r.pods[names[i]] = pt
		return nil
	})
	if spec.volumes {
		var a, b []string
		for i := range s.n {
			name := fmt.Sprintf("%s-%03d", spec.id(), i)
			if _, ok := r.pods[name]; !ok {
				continue
			}
			a = append(a, name+".bin")
			if volumesOf(i) == 2 {
				b = append(b, name+".bin")
			}
		}
		r.objects = s.checkObjects(ctx, s.buckets[0], a, s.opts.size)
		r.objects.add(s.checkObjects(ctx, s.buckets[1], b, s.opts.size))
	}
	slices.Sort(r.lost)
	return r, s.deleteAll(ctx)
}

// wave is one wave of a run: pods first to first+count-1.
type wave struct{ first, count int }

// waves splits n pods into waves of size (0: one wave of all).
func waves(n, size int) []wave {
	if size <= 0 || size >= n {
		return []wave{{0, n}}
	}
	var out []wave
	for first := 0; first < n; first += size {
		out = append(out, wave{first, min(size, n-first)})
	}
	return out
}

// inParallel runs fn(0) ... fn(n-1) on createWorkers goroutines, all of them to the end,
// and returns the first error (nil for none).
func inParallel(n int, fn func(i int) error) error {
	jobs := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range min(createWorkers, n) {
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

// burstResult is the admission burst's figures.
type burstResult struct {
	webhook, create []time.Duration
	apiServer       string
}

// admissionBurst creates s.n opted-in pods at once with a node selector no node has: the
// webhook admits them and they stay Pending, so the node is quiet and the figures are the
// admission's alone. The pods are deleted before it returns.
func (s *scale) admissionBurst(ctx context.Context) (burstResult, error) {
	var r burstResult
	apiBefore, err := apiServerMetrics(ctx, s.cs)
	if err != nil {
		return r, err
	}
	start := time.Now()
	lp := s.startLogPoller(ctx, start)
	var mu sync.Mutex
	err = inParallel(s.n, func(i int) error {
		p := s.pod("admission", fmt.Sprintf("admission-%03d", i), i, true)
		p.Spec.NodeSelector = map[string]string{"gcsfuse-csi.scale/no-such-node": "true"}
		t0 := time.Now()
		if _, err := s.cs.CoreV1().Pods(s.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
		mu.Lock()
		r.create = append(r.create, time.Since(t0))
		mu.Unlock()
		return nil
	})
	lines := lp.stop(ctx)
	if err != nil {
		return r, fmt.Errorf("admission burst: %w", err)
	}
	r.webhook = admissionLatencies(lines, start)
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
		return start, exit, fmt.Errorf("logs: %w", err)
	}
	return parseMoments(b)
}

// parseMoments reads the workload's START and EXIT lines (unix ms).
func parseMoments(b []byte) (start, exit time.Time, err error) {
	ms := func(re *regexp.Regexp) time.Time {
		if m := re.FindSubmatch(b); m != nil {
			v, _ := strconv.ParseInt(string(m[1]), 10, 64)
			return time.UnixMilli(v)
		}
		return time.Time{}
	}
	start, exit = ms(startLine), ms(exitLine)
	if start.IsZero() || exit.IsZero() {
		return start, exit, fmt.Errorf("no START/EXIT line in the app's log %q", b)
	}
	return start, exit, nil
}

// deleteAll deletes every Job and pod of this program and waits (bounded) until they are
// gone.
func (s *scale) deleteAll(ctx context.Context) error {
	bg := metav1.DeletePropagationBackground
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := s.cs.BatchV1().Jobs(s.ns).DeleteCollection(c, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{LabelSelector: runLabel}); err != nil {
		return err
	}
	if err := s.cs.CoreV1().Pods(s.ns).DeleteCollection(c, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: runLabel}); err != nil {
		return err
	}
	gone := func() bool {
		c, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		jobs, errJ := s.cs.BatchV1().Jobs(s.ns).List(c, metav1.ListOptions{LabelSelector: runLabel})
		pods, errP := s.cs.CoreV1().Pods(s.ns).List(c, metav1.ListOptions{LabelSelector: runLabel})
		return errJ == nil && errP == nil && len(jobs.Items) == 0 && len(pods.Items) == 0
	}
	for end := time.Now().Add(deleteWait); time.Now().Before(end); time.Sleep(deletePoll) {
		if gone() {
			return nil
		}
	}
	return fmt.Errorf("pods and Jobs of %s not gone after %s", s.ns, deleteWait)
}

// ---------------------------------------------------------------------------- objects

// objectCheck counts the objects looked up and those with the right bytes, and lists the
// others.
type objectCheck struct {
	want, ok int
	bad      []string
}

func (c *objectCheck) add(o objectCheck) {
	c.want += o.want
	c.ok += o.ok
	c.bad = append(c.bad, o.bad...)
}

// patternMD5 is the base64 MD5 of size bytes of the workload's pattern (byte i is i % 251).
func patternMD5(size int) string {
	h := md5.New()
	buf := make([]byte, 0, 64<<10)
	for i := range size {
		buf = append(buf, byte(i%251))
		if len(buf) == cap(buf) {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// checkObjects looks up each named object of bucket in the emulator: it must hold size bytes
// of the workload's pattern.
func (s *scale) checkObjects(ctx context.Context, bucket string, names []string, size int) objectCheck {
	c := objectCheck{want: len(names)}
	sum := patternMD5(size)
	var mu sync.Mutex
	idx := make(chan int)
	var wg sync.WaitGroup
	for range min(objectCheckers, len(names)) {
		wg.Go(func() { // ends when idx is closed
			for i := range idx {
				err := s.checkObject(ctx, bucket, names[i], size, sum)
				mu.Lock()
				if err != nil {
					c.bad = append(c.bad, fmt.Sprintf("%s/%s: %v", bucket, names[i], err))
				} else {
					c.ok++
				}
				mu.Unlock()
			}
		})
	}
	for i := range names {
		idx <- i
	}
	close(idx)
	wg.Wait()
	slices.Sort(c.bad)
	return c
}

func (s *scale) checkObject(ctx context.Context, bucket, name string, size int, sum string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.opts.gcsURL+"/storage/v1/b/"+url.PathEscape(bucket)+"/o/"+url.PathEscape(name), nil)
	if err != nil {
		return err
	}
	resp, err := s.gcs.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s", resp.Status, bytes.TrimSpace(msg))
	}
	var o struct {
		Size    string `json:"size"`
		MD5Hash string `json:"md5Hash"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&o); err != nil {
		return err
	}
	if o.Size != strconv.Itoa(size) || o.MD5Hash != sum {
		return fmt.Errorf("size %s md5 %s, want %d bytes of the pattern (md5 %s)", o.Size, o.MD5Hash, size, sum)
	}
	return nil
}

// ---------------------------------------------------------------------------- Job soak

// soakResult is the soak's outcome and figures.
type soakResult struct {
	jobs int
	// took is each completed Job's time from before its Create call to its Complete
	// condition seen (this machine's clock).
	took    []time.Duration
	lost    []string
	objects objectCheck
	elapsed time.Duration
	m       measured
}

func (r *soakResult) report(rep *report) {
	for _, l := range r.lost {
		rep.lose("soak: %s", l)
	}
	for _, b := range r.objects.bad {
		rep.lose("soak: object %s", b)
	}
	fmt.Printf("scale:   %d/%d Jobs Complete, %d/%d objects with their bytes, %.1f Jobs/min (node plugin CPU %.2f s, peak RSS %.1f MiB)\n",
		len(r.took), r.jobs, r.objects.ok, r.objects.want, r.perMinute(), r.m.cpu, r.m.peaks.nodeRSS)
}

func (r *soakResult) perMinute() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(len(r.took)) / r.elapsed.Minutes()
}

// jobOutcome reads a Job's terminal condition: done once Complete or Failed is true.
func jobOutcome(j *batchv1.Job) (done, ok bool, why string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true, ""
		case batchv1.JobFailed:
			return true, false, strings.TrimSpace(c.Reason + " " + c.Message)
		}
	}
	return false, false, ""
}

// jobEnd is a Job's end as the watch saw it.
type jobEnd struct {
	at  time.Time
	ok  bool
	why string
}

// jobWaiters hands each Job's end to the one worker waiting for it.
type jobWaiters struct {
	mu sync.Mutex
	m  map[string]chan jobEnd
}

func (w *jobWaiters) add(name string) chan jobEnd {
	c := make(chan jobEnd, 1)
	w.mu.Lock()
	w.m[name] = c
	w.mu.Unlock()
	return c
}

func (w *jobWaiters) remove(name string) {
	w.mu.Lock()
	delete(w.m, name)
	w.mu.Unlock()
}

func (w *jobWaiters) see(o runtime.Object) {
	j, ok := o.(*batchv1.Job)
	if !ok {
		return
	}
	done, succeeded, why := jobOutcome(j)
	if !done {
		return
	}
	w.mu.Lock()
	c := w.m[j.Name]
	delete(w.m, j.Name)
	w.mu.Unlock()
	if c != nil {
		c <- jobEnd{at: time.Now(), ok: succeeded, why: why}
	}
}

func (s *scale) job(name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: map[string]string{runLabel: jobRun}},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32(0)), Completions: new(int32(1)), Parallelism: new(int32(1)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{runLabel: jobRun}, Annotations: sidecarAnnotations()},
				Spec:       s.workloadSpec(name+".bin", 1, s.buckets[:1], s.opts.jobB),
			},
		},
	}
}

// soak runs -jobs Jobs, -jobs-parallel at a time, each deleted (with its pod) once complete,
// bounded by -soak-timeout as a whole and jobWait each; then checks their objects.
func (s *scale) soak(ctx context.Context, np nodePlugin) (*soakResult, error) {
	r := &soakResult{jobs: s.opts.jobs}
	sctx, cancel := context.WithTimeout(ctx, s.opts.soakTimeout)
	defer cancel()
	waiters := &jobWaiters{m: map[string]chan jobEnd{}}
	wctx, stopWatch := context.WithCancel(sctx)
	watched := make(chan struct{})
	go func() { // ends with wctx
		defer close(watched)
		follow(wctx, s.jobLister(runLabel+"="+jobRun), waiters.see)
	}()
	defer func() { stopWatch(); <-watched }()

	var mu sync.Mutex
	var succeeded []string
	start := time.Now()
	var last time.Time
	m, err := s.measure(ctx, np, func() error {
		idx := make(chan int)
		var wg sync.WaitGroup
		for range s.opts.jobsParallel {
			wg.Go(func() { // ends when idx is closed
				for i := range idx {
					name := fmt.Sprintf("job-%04d", i)
					end, err := s.runJob(sctx, waiters, name)
					mu.Lock()
					if err != nil {
						r.lost = append(r.lost, fmt.Sprintf("Job %s: %v", name, err))
					} else {
						r.took = append(r.took, end)
						succeeded = append(succeeded, name+".bin")
						last = time.Now()
					}
					mu.Unlock()
				}
			})
		}
		sent := 0
	feed:
		for ; sent < s.opts.jobs; sent++ {
			select {
			case idx <- sent:
			case <-sctx.Done():
				break feed
			}
		}
		close(idx)
		wg.Wait()
		if sent < s.opts.jobs {
			r.lost = append(r.lost, fmt.Sprintf("%d Jobs never started: the soak's bound %s was reached", s.opts.jobs-sent, s.opts.soakTimeout))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.m = m
	if !last.IsZero() {
		r.elapsed = last.Sub(start)
	}
	r.objects = s.checkObjects(ctx, s.buckets[0], succeeded, s.opts.jobB)
	slices.Sort(r.lost)
	return r, s.deleteAll(ctx)
}

// runJob creates one Job, waits for its end, and deletes it (its pod with it); it returns the
// time from before the Create call to the Complete condition seen.
func (s *scale) runJob(ctx context.Context, waiters *jobWaiters, name string) (time.Duration, error) {
	ended := waiters.add(name) // before Create: the end cannot be missed
	defer waiters.remove(name)
	t0 := time.Now()
	if _, err := s.cs.BatchV1().Jobs(s.ns).Create(ctx, s.job(name), metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		bg := metav1.DeletePropagationBackground
		_ = s.cs.BatchV1().Jobs(s.ns).Delete(c, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	}()
	t := time.NewTimer(jobWait)
	defer t.Stop()
	select {
	case e := <-ended:
		if !e.ok {
			return 0, fmt.Errorf("failed: %s", e.why)
		}
		return e.at.Sub(t0), nil
	case <-t.C:
		return 0, fmt.Errorf("not complete within %s", jobWait)
	case <-ctx.Done():
		return 0, fmt.Errorf("not complete when the soak's bound %s was reached", s.opts.soakTimeout)
	}
}

// ---------------------------------------------------------------------------- measures

// measured is what every run and the soak record about the node plugin and the components
// around themselves.
type measured struct {
	start time.Time
	// lines are the node plugin's and the webhook's log lines of interest since start.
	lines []string
	peaks *peaks
	// cpu is the node plugin's CPU seconds during the phase; hwm its VmHWM (peak RSS since
	// it started) at the phase's end, MiB.
	cpu, hwm float64
	// readyP99 is the node plugin's own histogram of NodePublishVolume -> serving, and
	// apiAdmissionP99 the API server's histogram of the webhook's calls (bucket bounds).
	readyP99, apiAdmissionP99 string
	// volumeFailures is the increase of the node plugin's volume failure counter.
	volumeFailures float64
	// promRSS (MiB) and promCPU (s) are the node plugin's peak RSS and CPU during the phase
	// as Prometheus saw them (its process_* series, 1 s scrapes); promErr why not.
	promRSS, promCPU float64
	promErr          error
}

func (m measured) publish() []time.Duration   { return publishLatencies(m.lines, m.start) }
func (m measured) admission() []time.Duration { return admissionLatencies(m.lines, m.start) }
func (m measured) ready() (all, sidecar []time.Duration) {
	return readyLatencies(m.lines, m.start)
}

// measure runs fn while sampling the node plugin and reading the components' logs, and
// scrapes the node plugin's and the API server's metrics before and after.
func (s *scale) measure(ctx context.Context, np nodePlugin, fn func() error) (measured, error) {
	m := measured{start: time.Now()}
	before, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return m, err
	}
	apiBefore, err := apiServerMetrics(ctx, s.cs)
	if err != nil {
		return m, err
	}
	cpu0 := cpuSeconds(np.pid)
	smp := startSampler(np.pid)
	lp := s.startLogPoller(ctx, m.start)
	err = fn()
	m.peaks = smp.stop()
	m.cpu = cpuSeconds(np.pid) - cpu0
	m.hwm = statusKiB(np.pid, "VmHWM") / 1024
	m.lines = lp.stop(ctx)
	if err != nil {
		return m, err
	}
	after, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return m, err
	}
	m.promRSS, m.promCPU, m.promErr = s.promFigures(ctx, m.start)
	m.readyP99 = histogramP99(before, after, metricscatalog.VolumeReady.Name, nil)
	m.apiAdmissionP99 = apiServerAdmissionP99(ctx, s.cs, apiBefore)
	m.volumeFailures = sumMetric(after, metricscatalog.VolumeFailures.Name) - sumMetric(before, metricscatalog.VolumeFailures.Name)
	return m, nil
}

// nodePlugin is the node plugin's pod and, on this machine, its process.
type nodePlugin struct {
	pod      string
	pid      int
	restarts int32
}

// nodePlugin finds the node plugin's pod and its process: the gcsfuse-csi-node process in
// the cgroup of the pod's container (its id is in the process's cgroup paths).
func (s *scale) nodePlugin(ctx context.Context) (nodePlugin, error) {
	l, err := s.cs.CoreV1().Pods(driverNS).List(ctx, metav1.ListOptions{LabelSelector: nodePluginLabel})
	if err != nil {
		return nodePlugin{}, err
	}
	if len(l.Items) != 1 {
		return nodePlugin{}, fmt.Errorf("%d node plugin pods, want 1", len(l.Items))
	}
	p := l.Items[0]
	np := nodePlugin{pod: p.Name}
	var cid string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == nodePluginCommand {
			np.restarts = cs.RestartCount
			if _, id, ok := strings.Cut(cs.ContainerID, "://"); ok {
				cid = id
			}
		}
	}
	if cid == "" {
		return np, fmt.Errorf("node plugin pod %s: no running container", p.Name)
	}
	var candidates []int
	for _, pid := range pids() {
		if argv0(pid) != nodePluginCommand {
			continue
		}
		candidates = append(candidates, pid)
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && bytes.Contains(b, []byte(cid)) {
			np.pid = pid
			return np, nil
		}
	}
	return np, fmt.Errorf("no %s process in the cgroup of container %s (candidates %v)", nodePluginCommand, cid, candidates)
}

func (s *scale) scrapeNodePlugin(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	l, err := s.cs.CoreV1().Pods(driverNS).List(c, metav1.ListOptions{LabelSelector: nodePluginLabel})
	if err != nil {
		return nil, fmt.Errorf("node plugin pods: %w", err)
	}
	if len(l.Items) != 1 {
		return nil, fmt.Errorf("%d node plugin pods, want 1", len(l.Items))
	}
	raw, err := s.cs.CoreV1().Pods(driverNS).ProxyGet("http", l.Items[0].Name, metricsPort, "/metrics", nil).DoRaw(c)
	if err != nil {
		return nil, fmt.Errorf("scrape the node plugin: %w", err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(raw))
}

// sumMetric sums a counter's or gauge's series.
func sumMetric(mfs map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	if mf := mfs[name]; mf != nil {
		for _, m := range mf.Metric {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return v
}

// logPoller reads the node plugin's and the webhook's logs every logPollEvery during a
// phase, keeping the lines relevantLine picks (deduplicated), so that a rotation of the
// container logs loses nothing older than one period.
type logPoller struct {
	s               *scale
	since, last     time.Time
	seen            map[string]bool
	lines           []string
	stopC, stoppedC chan struct{}
}

func (s *scale) startLogPoller(ctx context.Context, since time.Time) *logPoller {
	lp := &logPoller{s: s, since: since, last: since, seen: map[string]bool{}, stopC: make(chan struct{}), stoppedC: make(chan struct{})}
	go func() { // owned by the phase: ends at stop
		defer close(lp.stoppedC)
		t := time.NewTicker(logPollEvery)
		defer t.Stop()
		for {
			select {
			case <-lp.stopC:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				lp.fetch(ctx)
			}
		}
	}()
	return lp
}

func (lp *logPoller) fetch(ctx context.Context) {
	from := lp.last.Add(-logOverlap)
	if from.Before(lp.since) {
		from = lp.since
	}
	now := time.Now()
	for _, sel := range []string{nodePluginLabel, webhookLabel} {
		for _, l := range lp.s.logLines(ctx, driverNS, sel, from) {
			if relevantLine(l) && !lp.seen[l] {
				lp.seen[l] = true
				lp.lines = append(lp.lines, l)
			}
		}
	}
	lp.last = now
}

// stop reads once more and returns every line kept.
func (lp *logPoller) stop(ctx context.Context) []string {
	close(lp.stopC)
	<-lp.stoppedC
	lp.fetch(ctx)
	return lp.lines
}

// relevantLine picks the log lines the figures come from.
func relevantLine(l string) bool {
	return (strings.Contains(l, "csi call") && strings.Contains(l, "NodePublishVolume")) ||
		strings.Contains(l, "descriptor offered to sidecar") ||
		strings.Contains(l, `msg="gcsfuse serving"`) ||
		strings.Contains(l, "admission served")
}

// logLines returns the lines of the logs of the pods selected since t.
func (s *scale) logLines(ctx context.Context, namespace, selector string, since time.Time) []string {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	l, err := s.cs.CoreV1().Pods(namespace).List(c, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil
	}
	var out []string
	st := metav1.NewTime(since)
	for _, p := range l.Items {
		b, err := s.cs.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &st}).DoRaw(c)
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
func publishLatencies(lines []string, since time.Time) []time.Duration {
	var out []time.Duration
	for _, l := range lines {
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
func readyLatencies(lines []string, since time.Time) (all, sidecar []time.Duration) {
	offered := map[string]time.Time{}
	for _, l := range lines {
		key := field(l, "podUID") + "/" + field(l, "volume")
		switch {
		case strings.Contains(l, "descriptor offered to sidecar"):
			offered[key] = logTime(l)
		case strings.Contains(l, `msg="gcsfuse serving"`):
			if t0, ok := offered[key]; ok && t0.After(since) {
				all = append(all, logTime(l).Sub(t0))
				if ms, err := strconv.Atoi(field(l, "ms")); err == nil {
					sidecar = append(sidecar, time.Duration(ms)*time.Millisecond)
				}
			}
		}
	}
	return all, sidecar
}

// admissionLatencies are the webhook's own durations of its admissions (debug).
func admissionLatencies(lines []string, since time.Time) []time.Duration {
	var out []time.Duration
	for _, l := range lines {
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
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(c)
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
			if math.IsInf(b, 1) { // the +Inf bucket of a text exposition: above the last bound
				if i == 0 {
					return fmt.Sprintf("no finite bucket (n=%d)", total)
				}
				return fmt.Sprintf("> %s (n=%d)", time.Duration(bounds[i-1]*float64(time.Second)), total)
			}
			return fmt.Sprintf("<= %s (n=%d)", time.Duration(b*float64(time.Second)), total)
		}
	}
	return fmt.Sprintf("> %s (n=%d)", time.Duration(bounds[len(bounds)-1]*float64(time.Second)), total)
}

// ---------------------------------------------------------------------------- figures

// quantiles are the figures of every latency row: p50, p90, p99, max.
var quantiles = []float64{0.5, 0.9, 0.99, 1}

// dist is a latency distribution's n and quantiles.
type dist struct {
	n int
	q []time.Duration // at quantiles
}

func distOf(ds []time.Duration) dist {
	s := slices.Clone(ds)
	slices.Sort(s)
	d := dist{n: len(s)}
	for _, p := range quantiles {
		d.q = append(d.q, quantile.Nearest(s, p))
	}
	return d
}

func fmtDur(d time.Duration) string {
	if d < time.Second && d > -time.Second {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// row is a table row of a distribution: | what | n | p50 | p90 | p99 | max |.
func row(what string, ds []time.Duration) string {
	d := distOf(ds)
	if d.n == 0 {
		return fmt.Sprintf("| %s | 0 | | | | |", what)
	}
	cells := []string{what, strconv.Itoa(d.n)}
	for _, q := range d.q {
		cells = append(cells, fmtDur(q))
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

// shareRow is the difference of two distributions at each quantile, with and without the
// driver, and their ratio: the sidecar's share, side by side with the figures it comes from.
func shareRow(what string, with, without []time.Duration) string {
	a, b := distOf(with), distOf(without)
	if a.n == 0 || b.n == 0 {
		return fmt.Sprintf("| %s | %d / %d | | | | |", what, a.n, b.n)
	}
	cells := []string{what, fmt.Sprintf("%d / %d", a.n, b.n)}
	for i := range quantiles {
		c := fmt.Sprintf("%+.2f s", (a.q[i] - b.q[i]).Seconds())
		if b.q[i] > 0 {
			c += fmt.Sprintf(" (x%.2f)", float64(a.q[i])/float64(b.q[i]))
		}
		cells = append(cells, c)
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

func durations(m map[string]podTimes, f func(podTimes) time.Duration) []time.Duration {
	var out []time.Duration
	for _, p := range m {
		out = append(out, f(p))
	}
	return out
}

func startLatency(p podTimes) time.Duration { return p.appStart.Sub(p.created) }
func exitLatency(p podTimes) time.Duration  { return p.done.Sub(p.appExit) }
func createCall(p podTimes) time.Duration   { return p.createCall }

// pairedRun is one mode's run with volumes and its twin.
type pairedRun struct{ vol, twin *runResult }

func printLatencies(w io.Writer, burst burstResult, runs []pairedRun, soak *soakResult) {
	fmt.Fprintln(w, "\n| latency | n | p50 | p90 | p99 | max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	fmt.Fprintln(w, row("admission burst, quiet node: webhook (its log)", burst.webhook))
	fmt.Fprintln(w, row("admission burst, quiet node: pod Create call", burst.create))
	for _, r := range runs {
		name := r.vol.spec.name
		fmt.Fprintln(w, row(name+": pod created -> app start, volumes", durations(r.vol.pods, startLatency)))
		fmt.Fprintln(w, row(name+": pod created -> app start, twin", durations(r.twin.pods, startLatency)))
		fmt.Fprintln(w, shareRow(name+": the sidecar's share of the start (volumes - twin; x ratio)", durations(r.vol.pods, startLatency), durations(r.twin.pods, startLatency)))
		fmt.Fprintln(w, row(name+": app exit -> pod Succeeded, volumes", durations(r.vol.pods, exitLatency)))
		fmt.Fprintln(w, row(name+": app exit -> pod Succeeded, twin", durations(r.twin.pods, exitLatency)))
		fmt.Fprintln(w, shareRow(name+": the sidecar's share of the exit (volumes - twin; x ratio)", durations(r.vol.pods, exitLatency), durations(r.twin.pods, exitLatency)))
		fmt.Fprintln(w, row(name+": webhook admission (its log)", r.vol.m.admission()))
		fmt.Fprintln(w, row(name+": pod Create call, volumes (admission included)", durations(r.vol.pods, createCall)))
		fmt.Fprintln(w, row(name+": pod Create call, twin (no webhook)", durations(r.twin.pods, createCall)))
		all, sidecar := r.vol.m.ready()
		fmt.Fprintln(w, row(name+": NodePublishVolume (node plugin log)", r.vol.m.publish()))
		fmt.Fprintln(w, row(name+": NodePublishVolume -> gcsfuse serving, the kubelet starting the sidecar included (node plugin log)", all))
		fmt.Fprintln(w, row(name+": sidecar took the descriptor -> gcsfuse serving (the mount's own start)", sidecar))
	}
	if soak != nil {
		fmt.Fprintln(w, row("soak: Job created -> Complete", soak.took))
		fmt.Fprintln(w, row("soak: webhook admission (its log)", soak.m.admission()))
		all, sidecar := soak.m.ready()
		fmt.Fprintln(w, row("soak: NodePublishVolume -> gcsfuse serving (node plugin log)", all))
		fmt.Fprintln(w, row("soak: sidecar took the descriptor -> gcsfuse serving", sidecar))
	}
}

func printFigures(w io.Writer, runs []pairedRun, soak *soakResult) {
	fmt.Fprintln(w, "\n| figure | value |")
	fmt.Fprintln(w, "|---|---|")
	perPod := func(m measured, n int) string {
		if n == 0 {
			return fmt.Sprintf("%.2f s", m.cpu)
		}
		return fmt.Sprintf("%.2f s, %.1f ms per pod", m.cpu, 1000*m.cpu/float64(n))
	}
	for _, r := range runs {
		name := r.vol.spec.name
		fmt.Fprintf(w, "| %s: pods Succeeded, volumes / twin | %d/%d / %d/%d |\n", name, len(r.vol.pods), r.vol.n, len(r.twin.pods), r.twin.n)
		fmt.Fprintf(w, "| %s: objects in the emulator with their bytes (size, MD5) | %d/%d |\n", name, r.vol.objects.ok, r.vol.objects.want)
		fmt.Fprintf(w, "| %s: admission p99, the API server's histogram of the webhook call (bucket bound) | %s |\n", name, r.vol.m.apiAdmissionP99)
		fmt.Fprintf(w, "| %s: NodePublishVolume -> serving p99, %s (bucket bound) | %s |\n", name, metricscatalog.VolumeReady.Name, r.vol.m.readyP99)
		fmt.Fprintf(w, "| %s: volume failures (node plugin counter) | %.0f |\n", name, r.vol.m.volumeFailures)
		fmt.Fprintf(w, "| %s: node plugin peak RSS (%s samples), volumes / twin; VmHWM since its start | %.1f / %.1f MiB; %.1f MiB |\n", name, sampleEvery, r.vol.m.peaks.nodeRSS, r.twin.m.peaks.nodeRSS, r.vol.m.hwm)
		fmt.Fprintf(w, "| %s: node plugin CPU, volumes | %s |\n", name, perPod(r.vol.m, r.vol.n))
		fmt.Fprintf(w, "| %s: node plugin CPU, twin (the runtime watch sees every pod) | %s |\n", name, perPod(r.twin.m, r.twin.n))
		fmt.Fprintf(w, "| %s: node plugin peak RSS and CPU, volumes / twin, from Prometheus (%s scrapes) | %s / %s |\n", name, promrun.ScrapeInterval, r.vol.m.promString(), r.twin.m.promString())
		fmt.Fprintf(w, "| %s: gcsfuse RSS per volume (peak of each of %d processes) | %s |\n", name, len(r.vol.m.peaks.gcsfuse), mibStats(r.vol.m.peaks.gcsfuse))
		fmt.Fprintf(w, "| %s: sidecar RSS (peak of each of %d processes) | %s |\n", name, len(r.vol.m.peaks.sidecar), mibStats(r.vol.m.peaks.sidecar))
		fmt.Fprintf(w, "| %s: gcsfuse processes at once (peak) | %d |\n", name, r.vol.m.peaks.maxGcsfuse)
	}
	if soak != nil {
		fmt.Fprintf(w, "| soak: Jobs Complete | %d/%d |\n", len(soak.took), soak.jobs)
		fmt.Fprintf(w, "| soak: objects in the emulator with their bytes (size, MD5) | %d/%d |\n", soak.objects.ok, soak.objects.want)
		fmt.Fprintf(w, "| soak: Jobs per minute | %.1f (%d in %s) |\n", soak.perMinute(), len(soak.took), soak.elapsed.Round(time.Second))
		fmt.Fprintf(w, "| soak: admission p99, the API server's histogram (bucket bound) | %s |\n", soak.m.apiAdmissionP99)
		fmt.Fprintf(w, "| soak: NodePublishVolume -> serving p99, %s (bucket bound) | %s |\n", metricscatalog.VolumeReady.Name, soak.m.readyP99)
		fmt.Fprintf(w, "| soak: volume failures (node plugin counter) | %.0f |\n", soak.m.volumeFailures)
		fmt.Fprintf(w, "| soak: node plugin peak RSS (%s samples); VmHWM since its start | %.1f MiB; %.1f MiB |\n", sampleEvery, soak.m.peaks.nodeRSS, soak.m.hwm)
		fmt.Fprintf(w, "| soak: node plugin CPU | %.2f s, %.1f ms per Job |\n", soak.m.cpu, 1000*soak.m.cpu/float64(max(1, len(soak.took))))
		fmt.Fprintf(w, "| soak: node plugin peak RSS and CPU, from Prometheus (%s scrapes) | %s |\n", promrun.ScrapeInterval, soak.m.promString())
		fmt.Fprintf(w, "| soak: gcsfuse processes at once (peak) | %d |\n", soak.m.peaks.maxGcsfuse)
	}
}

// promString is the Prometheus figures of m, or why there are none.
func (m measured) promString() string {
	if m.promErr != nil {
		return "none: " + m.promErr.Error()
	}
	return fmt.Sprintf("%.1f MiB, %.2f s", m.promRSS, m.promCPU)
}

func mibStats(v []float64) string {
	if len(v) == 0 {
		return "no samples"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("p50 %.1f MiB, p99 %.1f MiB, max %.1f MiB", quantile.Nearest(s, 0.5), quantile.Nearest(s, 0.99), s[len(s)-1])
}

// ---------------------------------------------------------------------------- processes

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

// statFields are the fields of /proc/<pid>/stat after the command's closing parenthesis
// (field 3, the state, first).
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

func parentPID(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func cpuSeconds(pid int) float64 {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / clockTicks
}

// statusField is the value of key in /proc/<pid>/status, split in fields.
func statusField(status []byte, key string) []string {
	for l := range strings.SplitSeq(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key+":" {
			return f[1:]
		}
	}
	return nil
}

func statusKiB(pid int, key string) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	f := statusField(b, key)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// effectiveUID reads the effective uid (the second of Uid's four) from /proc/<pid>/status:
// inotify instances are charged to it.
func effectiveUID(status []byte) (int, bool) {
	f := statusField(status, "Uid")
	if len(f) < 2 {
		return 0, false
	}
	uid, err := strconv.Atoi(f[1])
	return uid, err == nil
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
	go func() { // owned by the phase: ends at stop
		defer close(p.stoppedC)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			p.nodeRSS = max(p.nodeRSS, statusKiB(nodePID, "VmRSS")/1024)
			n := 0
			for _, pid := range pids() {
				switch argv0(pid) {
				case gcsfuseCommand:
					if argv0(parentPID(pid)) != sidecarCommand {
						continue // not a pod's (another session's test, perhaps)
					}
					n++
					p.gcsfuseBy[pid] = max(p.gcsfuseBy[pid], statusKiB(pid, "VmRSS")/1024)
				case sidecarCommand:
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

// Leak kinds: the keys of a snapshot.
const (
	leakMounts     = "driver mounts (fuse.gcsfuse under <kubelet>/pods)"
	leakGcsfuse    = "gcsfuse processes (children of a sidecar)"
	leakSidecars   = "sidecar processes"
	leakSockets    = "hand-off and metrics sockets (gcsfuse-tmp emptyDirs)"
	leakExitFiles  = "exit files (gcsfuse-tmp emptyDirs)"
	leakOffers     = "pending offer records (node plugin state dir)"
	leakPodDirs    = "pod directories (<kubelet>/pods)"
	leakGoroutines = "node plugin goroutines (go_goroutines)"
	leakFDs        = "node plugin open fds (/proc/<pid>/fd)"
	leakInotify    = "inotify instances, uid " // + the uid: inotifyKind
)

var leakPublished = "node plugin published volumes (" + metricscatalog.VolumesPublished.Name + ")"

// inotifyKind is the leak kind of uid's inotify instances (uid 65534: the sidecars' and
// their gcsfuse's, contract.SidecarUID).
func inotifyKind(uid int) string { return leakInotify + strconv.Itoa(uid) }

// tolerance is how much each kind may grow without counting as a leak (goroutineTolerance
// says why the goroutines have one; every other kind has none).
var tolerance = map[string]int{leakGoroutines: goroutineTolerance}

// snapshot is what the node holds at one moment: a count per leak kind and, for the report,
// what was counted (mount points, paths, processes, fd kinds).
type snapshot struct {
	counts map[string]int
	items  map[string][]string
}

func (s *snapshot) add(kind, item string) {
	s.counts[kind]++
	s.items[kind] = append(s.items[kind], item)
}

// snapshot takes the node's counts. The mounts, processes and files are the whole node's
// (the cluster's only workload is this program's), taken before and after, so a leak is any
// growth.
func (s *scale) snapshot(ctx context.Context, np nodePlugin) (snapshot, error) {
	sn := snapshot{counts: map[string]int{}, items: map[string][]string{}}
	for _, k := range []string{leakMounts, leakGcsfuse, leakSidecars, leakSockets, leakExitFiles, leakOffers, leakPodDirs, leakGoroutines, leakFDs, leakPublished} {
		sn.counts[k] = 0
	}
	// The scrape first: the fds and goroutines it costs the node plugin (the API server's
	// proxy connection, kept alive or not) are then in every snapshot's counts alike.
	mfs, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return sn, err
	}
	sn.counts[leakGoroutines] = int(sumMetric(mfs, "go_goroutines"))
	sn.counts[leakPublished] = int(sumMetric(mfs, metricscatalog.VolumesPublished.Name))
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return sn, err
	}
	mounts, err := parseMountinfo(f)
	f.Close()
	if err != nil {
		return sn, err
	}
	for _, m := range driverMounts(mounts, s.opts.kubeletRoot) {
		sn.add(leakMounts, m.point+" (bucket "+m.source+")")
	}
	dirs, _ := filepath.Glob(podfiles.PodDir(s.opts.kubeletRoot, "*"))
	for _, d := range dirs {
		sn.add(leakPodDirs, d)
	}
	// Glob patterns: "*" for every pod, and for every volume.
	tmp := podfiles.At(podfiles.TmpDirPath(s.opts.kubeletRoot, "*"))
	for _, pattern := range []string{tmp.HandoffSocket("*"), tmp.MetricsSocket()} {
		socks, _ := filepath.Glob(pattern)
		for _, p := range socks {
			sn.add(leakSockets, p)
		}
	}
	exits, _ := filepath.Glob(tmp.ExitFile())
	for _, p := range exits {
		sn.add(leakExitFiles, p)
	}
	offers, _ := filepath.Glob(filepath.Join(s.opts.kubeletRoot, "plugins", contract.DriverName, "offers", "*.json"))
	for _, p := range offers {
		sn.add(leakOffers, p)
	}
	procs := readProcs()
	for uid, n := range inotifyByUID(procs) {
		sn.counts[inotifyKind(uid)] = n
	}
	for _, p := range procs {
		switch {
		case p.argv0 == gcsfuseCommand && argv0(p.ppid) == sidecarCommand:
			sn.add(leakGcsfuse, fmt.Sprintf("pid %d", p.pid))
		case p.argv0 == sidecarCommand:
			sn.add(leakSidecars, fmt.Sprintf("pid %d", p.pid))
		}
		for range p.inotify {
			sn.items[inotifyKind(p.uid)] = append(sn.items[inotifyKind(p.uid)], p.argv0)
		}
		if p.pid == np.pid {
			for _, k := range p.fdKinds {
				sn.add(leakFDs, k)
			}
		}
	}
	return sn, nil
}

// mount is one line of mountinfo: mount point, file system type and source.
type mount struct{ point, fstype, source string }

// parseMountinfo reads /proc/<pid>/mountinfo: "id parent major:minor root point options
// [optional fields...] - fstype source super-options", with spaces and such octal-escaped.
func parseMountinfo(r io.Reader) ([]mount, error) {
	var out []mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 6 || len(f) < sep+3 {
			return nil, fmt.Errorf("mountinfo line %q: not id parent dev root point options ... - fstype source", sc.Text())
		}
		out = append(out, mount{point: unescapeOctal(f[4]), fstype: f[sep+1], source: unescapeOctal(f[sep+2])})
	}
	return out, sc.Err()
}

// unescapeOctal undoes the kernel's \ooo escapes of space, tab, newline and backslash.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// driverMounts are this driver's mounts on the kubelet's pod volumes.
func driverMounts(ms []mount, kubeletRoot string) []mount {
	prefix := filepath.Join(kubeletRoot, "pods") + "/"
	var out []mount
	for _, m := range ms {
		if m.fstype == fusemount.FSType && strings.HasPrefix(m.point, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// proc is what the snapshot reads of one process.
type proc struct {
	pid, ppid, uid int
	argv0          string
	// inotify is its inotify instances (fds open on anon_inode:inotify).
	inotify int
	// fdKinds is the kind of each open fd (fdKind), read for the node plugin only.
	fdKinds []string
}

// readProcs reads every process of this machine (one that ends meanwhile is skipped).
func readProcs() []proc {
	var out []proc
	for _, pid := range pids() {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		uid, _ := effectiveUID(status)
		p := proc{pid: pid, ppid: parentPID(pid), uid: uid, argv0: argv0(pid)}
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			k := fdKind(target)
			if k == inotifyTarget {
				p.inotify++
			}
			if p.argv0 == nodePluginCommand {
				p.fdKinds = append(p.fdKinds, k)
			}
		}
		out = append(out, p)
	}
	return out
}

// inotifyTarget is the link target of an inotify instance's fd.
const inotifyTarget = "anon_inode:inotify"

// fdKind reduces an fd's link target to its kind: sockets and pipes without their inode
// numbers, anonymous inodes and files as they are.
func fdKind(target string) string {
	for _, k := range []string{"socket:", "pipe:"} {
		if strings.HasPrefix(target, k) {
			return strings.TrimSuffix(k, ":")
		}
	}
	return target
}

// inotifyByUID sums the processes' inotify instances per effective uid.
func inotifyByUID(ps []proc) map[int]int {
	out := map[int]int{}
	for _, p := range ps {
		if p.inotify > 0 {
			out[p.uid] += p.inotify
		}
	}
	return out
}

// leak is one kind's count before and after.
type leak struct {
	kind                   string
	before, after, allowed int
	// extra are the items after that were not there before (as a multiset).
	extra []string
}

func (l leak) leaked() bool { return l.after-l.before > l.allowed }

func (l leak) String() string {
	s := fmt.Sprintf("%s: %d before, %d after (%+d", l.kind, l.before, l.after, l.after-l.before)
	if l.allowed > 0 {
		s += fmt.Sprintf(", %d allowed", l.allowed)
	}
	s += ")"
	if len(l.extra) > 0 {
		shown := l.extra[:min(len(l.extra), maxLeakDetail)]
		s += ": " + strings.Join(shown, ", ")
		if len(l.extra) > len(shown) {
			s += fmt.Sprintf(" and %d more", len(l.extra)-len(shown))
		}
	}
	return s
}

// diffLeaks compares every kind of two snapshots (a kind in only one counts 0 in the other).
func diffLeaks(before, after snapshot, allowed map[string]int) []leak {
	kinds := map[string]bool{}
	for k := range before.counts {
		kinds[k] = true
	}
	for k := range after.counts {
		kinds[k] = true
	}
	var out []leak
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		out = append(out, leak{kind: k, before: before.counts[k], after: after.counts[k], allowed: allowed[k], extra: extra(before.items[k], after.items[k])})
	}
	return out
}

// extra is the multiset difference after - before, sorted.
func extra(before, after []string) []string {
	n := map[string]int{}
	for _, b := range before {
		n[b]++
	}
	var out []string
	for _, a := range after {
		if n[a] > 0 {
			n[a]--
			continue
		}
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// settle retakes the snapshot every settlePoll until nothing has leaked or -settle has
// passed (the kubelet unmounts and removes a deleted pod's directories in its own time), and
// returns the last comparison and how long it waited.
func (s *scale) settle(ctx context.Context, np nodePlugin, before snapshot) ([]leak, time.Duration, error) {
	start := time.Now()
	for {
		after, err := s.snapshot(ctx, np)
		if err != nil {
			return nil, 0, fmt.Errorf("leak snapshot after the runs: %w", err)
		}
		leaks := diffLeaks(before, after, tolerance)
		if !slices.ContainsFunc(leaks, leak.leaked) || time.Since(start) >= s.opts.settle {
			return leaks, time.Since(start), nil
		}
		sleep(ctx, settlePoll)
	}
}

func printLeaks(w io.Writer, leaks []leak, settled time.Duration) {
	fmt.Fprintf(w, "\n| leak: the node before the first pod and after the last one was gone (settled %s) | before | after | growth | allowed |\n", settled.Round(time.Second))
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, l := range leaks {
		fmt.Fprintf(w, "| %s | %d | %d | %+d | %d |\n", l.kind, l.before, l.after, l.after-l.before, l.allowed)
	}
}

// ---------------------------------------------------------------------------- Prometheus

// Bounds of the Prometheus run.
const (
	// promUpTimeout bounds the wait for its first scrape of the node plugin.
	promUpTimeout = time.Minute
	// promSettle is how long measure waits after a phase for the last scrape of it.
	promSettle = 2 * time.Second
)

// nodePluginSeries selects the node plugin's own process series as the documented scrape
// job labels them.
const nodePluginSeries = `{job="gcsfuse-csi-node", container="gcsfuse-csi-node"}`

// startPrometheus runs Prometheus against the node plugin and waits for its first scrape; the
// returned function stops it and removes its data.
func (s *scale) startPrometheus(ctx context.Context) (func(), error) {
	l, err := s.cs.CoreV1().Pods(driverNS).List(ctx, metav1.ListOptions{LabelSelector: nodePluginLabel})
	if err != nil {
		return nil, err
	}
	if len(l.Items) != 1 {
		return nil, fmt.Errorf("%d node plugin pods, want 1", len(l.Items))
	}
	dir, err := os.MkdirTemp("", "scale-prometheus-")
	if err != nil {
		return nil, err
	}
	prom, err := promrun.Run(ctx, promrun.Config{Binary: s.opts.prometheus, NetNS: s.opts.netns, Listen: s.opts.promListen,
		ScrapeConfig: s.opts.scrapeConfig, NodePlugin: &l.Items[0], Dir: dir,
		Transport: &http.Transport{Proxy: nil, DialContext: s.dial}}, promUpTimeout)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop := func() {
		prom.Stop()
		os.RemoveAll(dir)
	}
	s.prom = prom
	fmt.Printf("scale: Prometheus on %s scrapes the node plugin every %s (%s)\n", s.opts.promListen, promrun.ScrapeInterval, s.opts.scrapeConfig)
	return stop, nil
}

// promFigures reads the node plugin's peak RSS (MiB) and CPU (s) since start from
// Prometheus: the highest RSS sample, and the last CPU sample minus the first.
func (s *scale) promFigures(ctx context.Context, start time.Time) (rss, cpu float64, err error) {
	if s.prom == nil {
		return 0, 0, errors.New("no Prometheus")
	}
	time.Sleep(promSettle)
	window := fmt.Sprintf("[%ds]", int(math.Ceil(time.Since(start).Seconds())))
	one := func(q string) (float64, error) {
		v, err := s.prom.Query(ctx, q)
		if err != nil {
			return 0, err
		}
		if len(v) != 1 {
			return 0, fmt.Errorf("%s: %d samples, want 1", q, len(v))
		}
		return float64(v[0].Value), nil
	}
	if rss, err = one("max_over_time(process_resident_memory_bytes" + nodePluginSeries + window + ")"); err != nil {
		return 0, 0, err
	}
	cpu, err = one("max_over_time(process_cpu_seconds_total" + nodePluginSeries + window + ") - min_over_time(process_cpu_seconds_total" + nodePluginSeries + window + ")")
	return rss / (1 << 20), cpu, err
}
