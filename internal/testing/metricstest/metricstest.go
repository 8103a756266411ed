// Package metricstest reads Prometheus samples in tests.
package metricstest

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum adds up the series of mf (nil: none) whose labels include want: counters and gauges
// by value, histograms by sample count. series is how many matched.
func Sum(mf *dto.MetricFamily, want map[string]string) (sum float64, series int) {
	if mf == nil {
		return 0, 0
	}
next:
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		series++
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return sum, series
}

// SeriesOf is how many series the family name has in g (0 when it has none or g fails).
func SeriesOf(g prometheus.Gatherer, name string) int {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}
