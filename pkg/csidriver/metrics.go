package csidriver

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
)

// Volume failure reasons, the values of metricscatalog.VolumeFailures' reason label.
const (
	FailureStart   = "start"
	FailureExited  = "exited"
	FailureRefused = "refused"
)

// Metrics are the Node service's metrics. A nil *Metrics records nothing.
type Metrics struct {
	ready    prometheus.Histogram
	failures *prometheus.CounterVec
	calls    *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them on reg; published reports the number of
// published volumes at each scrape (NodeServer.PublishedVolumes; nil: not exported).
func NewMetrics(reg prometheus.Registerer, published func() int) (*Metrics, error) {
	m := &Metrics{
		ready:    metricscatalog.VolumeReady.NewHistogram(),
		failures: metricscatalog.VolumeFailures.NewCounterVec(),
		calls:    metricscatalog.CallSeconds.NewHistogramVec(),
	}
	cs := []prometheus.Collector{m.ready, m.failures, m.calls}
	if published != nil {
		cs = append(cs, metricscatalog.VolumesPublished.NewGaugeFunc(func() float64 { return float64(published()) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("csidriver: register metrics: %w", err)
		}
	}
	for _, r := range []string{FailureStart, FailureExited, FailureRefused} {
		m.failures.WithLabelValues(r)
	}
	return m, nil
}

// Status records a gcsfuse report about a volume published at publishedAt
// (nodevolume.StatusRecorder).
func (m *Metrics) Status(st *handoff.Status, publishedAt time.Time) {
	if m == nil {
		return
	}
	switch st.State {
	case handoff.StateStarted:
		m.ready.Observe(time.Since(publishedAt).Seconds())
	case handoff.StateFailed:
		m.failures.WithLabelValues(FailureStart).Inc()
	case handoff.StateExited:
		m.failures.WithLabelValues(FailureExited).Inc()
	case handoff.StateRefused:
		m.failures.WithLabelValues(FailureRefused).Inc()
	}
}

// call records the end of a Node call that started at start.
func (m *Metrics) call(method string, start time.Time, err error) {
	if m != nil {
		m.calls.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
	}
}

// PublishedVolumes is the number of targets this process published and did not unpublish.
func (s *NodeServer) PublishedVolumes() int { return s.store.Published() }
