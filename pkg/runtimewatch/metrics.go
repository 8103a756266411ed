package runtimewatch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
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
		source:  metricscatalog.RuntimeSource.NewGaugeVec(),
		events:  metricscatalog.RuntimeEvents.NewCounterVec(),
		relists: metricscatalog.RuntimeRelists.NewCounter(),
		errors:  metricscatalog.RuntimeErrors.NewCounterVec(),
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

// The values of metricscatalog.RuntimeErrors' op label.
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
