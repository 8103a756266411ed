package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
)

// The controller serves exactly the families the catalog declares for it, with the
// catalog's type, help, labels and buckets: the reference's table of them is true, and a
// library upgrade that renames or relabels one fails here, not on a dashboard.
func TestMetricsAreTheCatalogs(t *testing.T) {
	m, reg := newMetrics()
	// A series in each vector, so that Gather has every family.
	m.PersistentVolumeClaimProvisionTotal.WithLabelValues("c", "s").Inc()
	m.PersistentVolumeClaimProvisionFailedTotal.WithLabelValues("c", "s").Inc()
	m.PersistentVolumeClaimProvisionDurationSeconds.WithLabelValues("c", "s").Observe(1)
	m.PersistentVolumeDeleteTotal.WithLabelValues("c").Inc()
	m.PersistentVolumeDeleteFailedTotal.WithLabelValues("c").Inc()
	m.PersistentVolumeDeleteDurationSeconds.WithLabelValues("c").Observe(1)
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]metricscatalog.Family{}
	for _, f := range metricscatalog.ControllerFamilies {
		want[f.Name] = f
	}
	for _, mf := range got {
		f, ok := want[mf.GetName()]
		if !ok {
			t.Errorf("%s is served and not in metricscatalog.ControllerFamilies", mf.GetName())
			continue
		}
		delete(want, mf.GetName())
		if kind := strings.ToLower(mf.GetType().String()); kind != string(f.Kind) || mf.GetHelp() != f.Help {
			t.Errorf("%s: served as a %s with help %q; the catalog has a %s with %q", f.Name, kind, mf.GetHelp(), f.Kind, f.Help)
		}
		series := mf.GetMetric()[0]
		var labels []string
		for _, l := range series.GetLabel() {
			labels = append(labels, l.GetName())
		}
		if !slices.Equal(labels, f.Labels) {
			t.Errorf("%s: labels %v; the catalog has %v", f.Name, labels, f.Labels)
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			var bounds []float64
			for _, b := range series.GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			if !slices.Equal(bounds, f.Buckets) {
				t.Errorf("%s: buckets %v; the catalog has %v", f.Name, bounds, f.Buckets)
			}
		}
	}
	for name := range want {
		t.Errorf("%s is in metricscatalog.ControllerFamilies and not served", name)
	}
	// Every collector the library makes is served: one it adds in an upgrade fails here.
	v := reflect.ValueOf(m)
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || !reg.Unregister(c) {
			t.Errorf("the library's metrics.Metrics.%s is not registered", v.Type().Field(i).Name)
		}
	}
}
