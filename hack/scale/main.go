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
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dialguard"
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
