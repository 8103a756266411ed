// Package podmetrics collects the gcsfuse metrics of this node's pods and re-exports them from
// the node plugin. Each pod's sidecar serves its volumes' series on a unix socket in the pod's
// gcsfuse-tmp emptyDir (pkg/podfiles); at each scrape of the node plugin the
// Collector reads the sockets of the pods the pod watch knows, so the series of a pod that is
// gone disappear with it, and labels every series with namespace, pod, volume and bucket.
// A sidecar is run by the pod's user: the socket is reached without following symlinks, what
// it returns is bounded in time and size, reduced to pkg/gcsfusemetrics's families and
// labels, and a volume label that is not a volume of the pod is dropped.
package podmetrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/driverpod"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

const (
	// DefaultPodTimeout bounds the read of one pod's socket. A sidecar answers from
	// gcsfuse's own registry in milliseconds; a socket that takes longer is most likely
	// hanging, and each worker can then try the next pod within the same scrape budget.
	DefaultPodTimeout = 500 * time.Millisecond
	// DefaultScrapeBudget bounds a whole collection, whatever the pods do: the pods' series
	// share the node plugin's /metrics with its own, and any container that mounts the
	// pod's gcsfuse-tmp volume can make its metrics socket accept and never answer. Past it
	// the pods not read yet are left out of that scrape (metricscatalog.PodMetricsSlow), so /metrics
	// answers within about a second and the node plugin's own series never vanish behind a
	// scrape timeout.
	DefaultScrapeBudget = 900 * time.Millisecond
	// DefaultWorkers is how many pods are read at once.
	DefaultWorkers = 8
	// Labels added to every series.
	LabelNamespace = "namespace"
	LabelPod       = "pod"
)

// Pod is a pod whose sidecar may serve metrics, and the volume names it may report.
type Pod struct {
	UID, Namespace, Name string
	Volumes              []string
	// Dir, if set, is the directory whose metrics socket is read instead of the pod's
	// gcsfuse-tmp emptyDir: the node's shared mounter's (its volumes are sharing keys).
	Dir string
}

// FromPod returns the Pod of a cached pod that uses the driver, installed as driverName: its
// volumes that are the driver's as the node tells them (driverpod.OnNode: inline ones, and
// the claims of a pod with the driver's sidecar). ok is false for a pod without such a
// volume, and for a pod that has finished (Succeeded, Failed: its sidecar is gone, and such
// pods may stay for long, as a Job's do).
func FromPod(p *corev1.Pod, driverName string) (Pod, bool) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return Pod{}, false
	}
	out := Pod{UID: string(p.UID), Namespace: p.Namespace, Name: p.Name, Volumes: driverpod.OnNode(p, driverName)}
	return out, len(out.Volumes) > 0 && out.UID != ""
}

// Config configures a Collector.
type Config struct {
	// KubeletRoot is the kubelet's root directory (/var/lib/kubelet).
	KubeletRoot string
	// Pods lists the pods to read at a scrape; it must be safe to call from any goroutine.
	Pods func() []Pod
	// PodTimeout bounds one pod's read (0: DefaultPodTimeout).
	PodTimeout time.Duration
	// Workers is how many pods are read at once (0: DefaultWorkers).
	Workers int
	// ScrapeBudget bounds a whole collection (0: DefaultScrapeBudget).
	ScrapeBudget time.Duration
	Log          *slog.Logger
}

// Collector is a prometheus.Gatherer of every pod's gcsfuse series.
type Collector struct {
	cfg     Config
	errors  *prometheus.CounterVec
	seconds prometheus.Gauge
	slow    prometheus.Gauge

	// mu guards hungUIDs: the pods whose socket timed out and has not answered since,
	// read after every other pod so that a few hanging sockets cannot keep the workers
	// from the healthy pods. A pod leaves it when it answers or is no longer listed: it
	// never outgrows the pods.
	mu       sync.Mutex
	hungUIDs map[string]bool
}

// New validates cfg and registers the collector's own metrics on reg.
func New(cfg Config, reg prometheus.Registerer) (*Collector, error) {
	switch {
	case !filepath.IsAbs(cfg.KubeletRoot):
		return nil, fmt.Errorf("podmetrics: kubelet root %q is not an absolute path", cfg.KubeletRoot)
	case cfg.Pods == nil:
		return nil, errors.New("podmetrics: no pod source")
	case cfg.PodTimeout < 0 || cfg.Workers < 0 || cfg.ScrapeBudget < 0:
		return nil, errors.New("podmetrics: negative timeout, budget or worker count")
	}
	if cfg.ScrapeBudget == 0 {
		cfg.ScrapeBudget = DefaultScrapeBudget
	}
	if cfg.PodTimeout == 0 {
		cfg.PodTimeout = DefaultPodTimeout
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	c := &Collector{cfg: cfg,
		errors:  metricscatalog.PodMetricsErrors.NewCounterVec(),
		seconds: metricscatalog.PodMetricsSeconds.NewGauge(),
		slow:    metricscatalog.PodMetricsSlow.NewGauge(),
	}
	for _, col := range []prometheus.Collector{c.errors, c.seconds, c.slow} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("podmetrics: register metrics: %w", err)
		}
	}
	for _, r := range []string{"dial", "read", "parse"} {
		c.errors.WithLabelValues(r)
	}
	return c, nil
}

// Gather implements prometheus.Gatherer: it reads every pod's socket (bounded in time and
// concurrency, the whole within ScrapeBudget) and returns their series. A pod that cannot
// be read, or not in time, is counted and left out; it never fails the scrape.
func (c *Collector) Gather() ([]*dto.MetricFamily, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ScrapeBudget)
	defer cancel()
	pods := c.order(c.cfg.Pods())
	results := make([][]*dto.MetricFamily, len(pods))
	outcome := make([]readOutcome, len(pods))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(c.cfg.Workers, len(pods)) {
		wg.Go(func() { // ends when jobs is closed; each job bounded by ctx
			for i := range jobs {
				results[i], outcome[i] = c.collectPod(ctx, pods[i])
			}
		})
	}
	for i := range pods {
		select {
		case jobs <- i:
		case <-ctx.Done():
			outcome[i] = notReached
		}
	}
	close(jobs)
	wg.Wait()
	slow := 0
	c.mu.Lock()
	hungNow := map[string]bool{}
	for i, o := range outcome {
		switch uid := pods[i].UID; o {
		case hung:
			hungNow[uid] = true
		case notReached:
			if c.hungUIDs[uid] {
				hungNow[uid] = true // still not known to answer
			}
		}
		if o != read {
			slow++
		}
	}
	c.hungUIDs = hungNow
	c.mu.Unlock()
	c.slow.Set(float64(slow))
	c.seconds.Set(time.Since(start).Seconds())
	return gcsfusemetrics.Merge(results), nil
}

// readOutcome is what became of one pod at a collection.
type readOutcome int

const (
	read       readOutcome = iota // read, or failed for a reason of its own (counted in metricscatalog.PodMetricsErrors.Name)
	hung                          // its socket did not answer within PodTimeout or the budget
	notReached                    // the budget ran out before its turn
)

// order puts the pods whose socket hangs last.
func (c *Collector) order(pods []Pod) []Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.hungUIDs) == 0 {
		return pods
	}
	out := make([]Pod, 0, len(pods))
	for _, p := range pods {
		if !c.hungUIDs[p.UID] {
			out = append(out, p)
		}
	}
	for _, p := range pods {
		if c.hungUIDs[p.UID] {
			out = append(out, p)
		}
	}
	return out
}

// collectPod reads one pod's series within ctx, the collection's budget.
func (c *Collector) collectPod(ctx context.Context, p Pod) ([]*dto.MetricFamily, readOutcome) {
	if ctx.Err() != nil {
		return nil, notReached // the budget was spent while this pod waited for a worker
	}
	log := c.cfg.Log.With("pod", p.Namespace+"/"+p.Name, "podUID", p.UID)
	mfs, reason, err := c.read(ctx, p)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
			log.Debug("the sidecar's metrics did not come within the scrape budget", "err", err)
			return nil, hung
		}
		if reason != "" {
			c.errors.WithLabelValues(reason).Inc()
			log.Debug("cannot read the sidecar's metrics", "reason", reason, "err", err)
		}
		return nil, read
	}
	out := gcsfusemetrics.Reduce(mfs, func(n string) string { return n }, gcsfusemetrics.LabelVolume, gcsfusemetrics.LabelBucket)
	for _, mf := range out {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if !slices.Contains(p.Volumes, m.Label[0].GetValue()) { // Reduce put volume first
				continue
			}
			m.Label = append([]*dto.LabelPair{
				{Name: proto.String(LabelNamespace), Value: proto.String(p.Namespace)},
				{Name: proto.String(LabelPod), Value: proto.String(p.Name)},
			}, m.Label...)
			kept = append(kept, m)
		}
		mf.Metric = kept
	}
	return out, read
}

// read fetches the pod's socket. reason is "" for a pod without a socket (no sidecar
// running yet, or one of a release without metrics): not an error worth counting.
func (c *Collector) read(ctx context.Context, p Pod) (map[string]*dto.MetricFamily, string, error) {
	var dir *os.File
	var err error
	if p.Dir != "" {
		dir, err = podpath.OpenDir(p.Dir)
	} else {
		dir, err = podfiles.OpenTmpDir(c.cfg.KubeletRoot, p.UID)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, "", err
		}
		return nil, "dial", err
	}
	defer dir.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PodTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	conn, err := podfiles.DialMetrics(dir, deadline)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, "", err
		}
		return nil, "dial", err
	}
	defer conn.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://sidecar/metrics", nil)
	if err != nil {
		return nil, "read", err
	}
	req.Close = true
	req.Header.Set("Accept", gcsfusemetrics.Accept)
	if err := req.Write(conn); err != nil {
		return nil, "read", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return nil, "read", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "read", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	mfs, err := gcsfusemetrics.Decode(resp.Body, expfmt.ResponseFormat(resp.Header))
	if err != nil {
		return nil, "parse", err
	}
	return mfs, "", nil
}
