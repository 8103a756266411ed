package podwatch

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
)

// The values of metricscatalog.WatchErrors' op label.
const (
	opList  = "list"
	opWatch = "watch"
)

// RegisterPodsTracked exports metricscatalog.PodsTracked on reg, read from count at each
// scrape.
func RegisterPodsTracked(reg prometheus.Registerer, count func() int) error {
	return reg.Register(metricscatalog.PodsTracked.NewGaugeFunc(func() float64 { return float64(count()) }))
}

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
		podsDone:        metricscatalog.PodsDone.NewCounterVec(),
		sidecarFailures: metricscatalog.SidecarFailures.NewCounter(),
		exitLatency:     metricscatalog.ExitLatency.NewHistogramVec(),
		watchSynced:     metricscatalog.WatchSynced.NewGauge(),
		watchErrors:     metricscatalog.WatchErrors.NewCounterVec(),
		follows:         metricscatalog.RuntimeFollows.NewCounterVec(),
		followSeconds:   metricscatalog.RuntimeFollow.NewHistogramVec(),
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
