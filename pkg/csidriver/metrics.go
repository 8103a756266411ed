package csidriver

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
)

// Metric names, exported so dashboards, alerts and tests spell them once.
const (
	// MetricVolumeReady is the time from NodePublishVolume to the sidecar's report that
	// gcsfuse serves the volume: what a pod's start waits for, per volume.
	MetricVolumeReady = "gcsfuse_csi_volume_ready_seconds"
	// MetricVolumeFailures counts volumes that failed, by reason: start (gcsfuse never
	// served), exited (gcsfuse died while serving), refused (the sidecar refused the hand-off).
	MetricVolumeFailures = "gcsfuse_csi_volume_failures_total"
	// MetricCallSeconds is the duration of NodePublishVolume and NodeUnpublishVolume, by
	// method and gRPC code.
	MetricCallSeconds = "gcsfuse_csi_node_call_seconds"
	// MetricVolumesPublished is the number of volumes this node plugin has published and
	// not unpublished since it started.
	MetricVolumesPublished = "gcsfuse_csi_volumes_published"
)

// Volume failure reasons, the values of MetricVolumeFailures' reason label.
const (
	FailureStart   = "start"
	FailureExited  = "exited"
	FailureRefused = "refused"
)

// ReadyBuckets span 10 ms to 60 s: a volume is usually ready within 100-400 ms of its
// publish; a native sidecar starts after every volume is published, so the kubelet's own
// pace is in the tail.
var ReadyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}

// CallBuckets span 1 ms to 10 s.
var CallBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}

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
		ready: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricVolumeReady,
			Help:    "Time from NodePublishVolume to the sidecar's report that gcsfuse serves the volume.",
			Buckets: ReadyBuckets,
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricVolumeFailures,
			Help: "Volumes that failed, by reason: start (gcsfuse never served), exited (gcsfuse died while serving), refused (the sidecar refused the hand-off).",
		}, []string{"reason"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricCallSeconds,
			Help:    "Duration of NodePublishVolume and NodeUnpublishVolume, by method and gRPC code.",
			Buckets: CallBuckets,
		}, []string{"method", "code"}),
	}
	cs := []prometheus.Collector{m.ready, m.failures, m.calls}
	if published != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricVolumesPublished,
			Help: "Volumes published by this node plugin and not unpublished since it started.",
		}, func() float64 { return float64(published()) }))
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

// status records a sidecar report about a volume published at publishedAt.
func (m *Metrics) status(st *handoff.Status, publishedAt time.Time) {
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
func (s *NodeServer) PublishedVolumes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.published)
}
