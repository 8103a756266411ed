package runtimewatch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, exported so dashboards, alerts and tests spell them once.
const (
	// MetricSource is 1 for the source in use (events or poll), 0 for the other.
	MetricSource = "gcsfuse_csi_runtime_watch_source"
	// MetricEvents counts container events received, by kind.
	MetricEvents = "gcsfuse_csi_runtime_watch_events_total"
	// MetricRelists counts node-wide container listings.
	MetricRelists = "gcsfuse_csi_runtime_watch_relists_total"
	// MetricErrors counts failed listings and ended event streams, by op.
	MetricErrors = "gcsfuse_csi_runtime_watch_errors_total"
)

// Metrics are the runtime watch's metrics. A nil *Metrics records nothing.
type Metrics struct {
	source  *prometheus.GaugeVec
	events  *prometheus.CounterVec
	relists prometheus.Counter
	errors  *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		source: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricSource,
			Help: "Where the node plugin learns container exits: 1 for the source in use (events: the CRI event stream; poll: a node-wide ListContainers every 100 ms), 0 for the other. Both 0: no runtime endpoint, the API server alone.",
		}, []string{"source"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricEvents,
			Help: "Container events received from the runtime's event stream, by kind.",
		}, []string{"kind"}),
		relists: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricRelists,
			Help: "Node-wide container listings (every poll, or the resync behind the event stream).",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricErrors,
			Help: "Failed container listings (op=list) and ended event streams (op=events); both are retried.",
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.source, m.events, m.relists, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("runtimewatch: register metrics: %w", err)
		}
	}
	m.source.WithLabelValues(SourceEvents).Set(0)
	m.source.WithLabelValues(SourcePoll).Set(0)
	// Both ops exist from the start at 0, so a dashboard shows no errors rather than no data.
	m.errors.WithLabelValues(opList)
	m.errors.WithLabelValues(opEvents)
	return m, nil
}

func (m *Metrics) setSource(s string) {
	if m == nil {
		return
	}
	for _, src := range []string{SourceEvents, SourcePoll} {
		v := 0.0
		if src == s {
			v = 1
		}
		m.source.WithLabelValues(src).Set(v)
	}
}

func (m *Metrics) event(kind string) {
	if m != nil {
		m.events.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) relisted() {
	if m != nil {
		m.relists.Inc()
	}
}

// The values of MetricErrors' op label.
const (
	opList   = "list"
	opEvents = "events"
)

func (m *Metrics) listError() {
	if m != nil {
		m.errors.WithLabelValues(opList).Inc()
	}
}

func (m *Metrics) streamError() {
	if m != nil {
		m.errors.WithLabelValues(opEvents).Inc()
	}
}
