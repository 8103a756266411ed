package sidecar

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// Metrics are the sidecar's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	gcsfuseExits *prometheus.CounterVec
	doneToExit   *prometheus.HistogramVec
}

// NewMetrics registers the sidecar's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		gcsfuseExits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gcsfuse_sidecar_gcsfuse_exits_total",
			Help: "gcsfuse processes that ended, by reason (unmounted, stopped, failed).",
		}, []string{"reason"}),
		doneToExit: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gcsfuse_sidecar_workload_done_to_exit_seconds",
			Help:    "Time from the last workload container's finish to the sidecar's exit, by mode.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 13),
		}, []string{"mode"}),
	}
	for _, c := range []prometheus.Collector{m.gcsfuseExits, m.doneToExit} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) gcsfuseExit(r exitResult) {
	if m == nil {
		return
	}
	reason := "failed"
	switch {
	case r.Requested:
		reason = "stopped"
	case r.Clean:
		reason = "unmounted"
	}
	m.gcsfuseExits.WithLabelValues(reason).Inc()
}

func (m *Metrics) exited(mode string, r podfiles.Reason) {
	if m == nil || r.WorkloadFinishedAt.IsZero() {
		return
	}
	m.doneToExit.WithLabelValues(mode).Observe(time.Since(r.WorkloadFinishedAt).Seconds())
}
