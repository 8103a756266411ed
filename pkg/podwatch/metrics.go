package podwatch

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// Metric names, exported so dashboards, alerts and tests spell them once.
const (
	MetricPodsDone        = "gcsfuse_csi_pods_done_total"
	MetricSidecarFailures = "gcsfuse_csi_sidecar_failures_total"
	MetricExitLatency     = "gcsfuse_csi_workload_done_to_sidecar_exit_seconds"
	MetricRuntimeFollows  = "gcsfuse_csi_runtime_follows_total"
	MetricRuntimeFollow   = "gcsfuse_csi_runtime_follow_seconds"
	// MetricWatchSynced is 1 while the pod watch is in step with the API server: its cache
	// has synced and its latest list or watch request succeeded. 0 means pods that finish
	// now are only acted on once the API answers again (CSI calls are not affected).
	MetricWatchSynced = "gcsfuse_csi_pod_watch_synced"
	// MetricWatchErrors counts failed list and watch requests of the pod watch, by op.
	MetricWatchErrors = "gcsfuse_csi_pod_watch_errors_total"
	// MetricPodsTracked is the number of this node's pods that use the driver, in the pod
	// watch's cache.
	MetricPodsTracked = "gcsfuse_csi_pods_tracked"
)

// The values of MetricWatchErrors' op label.
const (
	opList  = "list"
	opWatch = "watch"
)

// RegisterPodsTracked exports MetricPodsTracked on reg, read from count at each scrape.
func RegisterPodsTracked(reg prometheus.Registerer, count func() int) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricPodsTracked,
		Help: "Pods of this node that use the driver, in the pod watch's cache.",
	}, func() float64 { return float64(count()) }))
}

// FollowBuckets spans 100 ms to 10 min: a follow ends one or two runtime polls after the
// containers exit, or at the pod's grace period plus a margin when they never do.
var FollowBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// ExitLatencyBuckets spans 10 ms to 60 s: an exit driven by the node plugin should take well
// under a second, while one that waits for the kubelet's grace period shows up in the tail.
var ExitLatencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Metrics are the node plugin's lifecycle metrics. A nil *Metrics is valid and records
// nothing, so callers need no nil checks.
type Metrics struct {
	podsDone        *prometheus.CounterVec
	sidecarFailures prometheus.Counter
	exitLatency     *prometheus.HistogramVec
	follows         *prometheus.CounterVec
	followSeconds   *prometheus.HistogramVec
	watchSynced     prometheus.Gauge
	watchErrors     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (not the global registry, so that
// tests and several watchers in one process do not collide). It fails if one is already
// registered there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		podsDone: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPodsDone,
			Help: "Pods whose workload was found done, so their sidecar was told to exit, by deciding rule.",
		}, []string{"rule"}),
		sidecarFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricSidecarFailures,
			Help: "Pods whose gcsfuse sidecar exited with a non-zero code.",
		}),
		exitLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricExitLatency,
			Help:    "Time from the last workload container's exit to the sidecar's exit, by sidecar mode.",
			Buckets: ExitLatencyBuckets,
		}, []string{"mode"}),
		watchSynced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricWatchSynced,
			Help: "1 while the pod watch is in step with the API server (cache synced, latest list or watch request succeeded), else 0.",
		}),
		watchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricWatchErrors,
			Help: "Failed list and watch requests of the pod watch, by op (list, watch); the watch retries them with backoff.",
		}, []string{"op"}),
		follows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRuntimeFollows,
			Help: "Pods followed in the container runtime until the containers that use their mounts exited, by trigger and result (released, deadline, stopped).",
		}, []string{"why", "result"}),
		followSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricRuntimeFollow,
			Help:    "Time a pod was followed in the container runtime, by result.",
			Buckets: FollowBuckets,
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.podsDone, m.sidecarFailures, m.exitLatency, m.follows, m.followSeconds, m.watchSynced, m.watchErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("podwatch: register metrics: %w", err)
		}
	}
	// Both ops exist from the start at 0, so a dashboard shows no errors rather than no data.
	m.watchErrors.WithLabelValues(opList)
	m.watchErrors.WithLabelValues(opWatch)
	return m, nil
}

// ObserveExitLatency records how long the sidecar of a pod in mode (contract.ModeLegacy or
// contract.ModeNative) took to exit after its workload finished; negative durations, from
// clock skew between nodes and the API server, are recorded as 0.
func (m *Metrics) ObserveExitLatency(mode string, d time.Duration) {
	if m == nil {
		return
	}
	if d < 0 {
		d = 0
	}
	m.exitLatency.WithLabelValues(mode).Observe(d.Seconds())
}

// ObserveFollow records the end of one runtime follow of a pod: why it started (the
// trigger), how it ended (result) and how long it took.
func (m *Metrics) ObserveFollow(why, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.follows.WithLabelValues(why, result).Inc()
	m.followSeconds.WithLabelValues(result).Observe(max(d, 0).Seconds())
}

// PodDone counts a pod whose workload was found done by rule, from the API or the runtime.
func (m *Metrics) PodDone(rule lifecycle.Rule) {
	if m != nil {
		m.podsDone.WithLabelValues(string(rule)).Inc()
	}
}

// SidecarFailure counts a failed run of a sidecar.
func (m *Metrics) SidecarFailure() {
	if m != nil {
		m.sidecarFailures.Inc()
	}
}

func (m *Metrics) setWatchSynced(synced bool) {
	if m == nil {
		return
	}
	v := 0.0
	if synced {
		v = 1
	}
	m.watchSynced.Set(v)
}

func (m *Metrics) watchError(op string) {
	if m != nil {
		m.watchErrors.WithLabelValues(op).Inc()
	}
}
