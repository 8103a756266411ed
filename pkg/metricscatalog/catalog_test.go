package metricscatalog

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every family is well formed, once: a valid and unique name, help, counters ending in
// _total, histograms with buckets and only they, an exporter; and each builds the collector
// its kind says, registering on a registry without a conflict.
func TestCatalog(t *testing.T) {
	name := regexp.MustCompile(`^gcsfuse_csi_[a-z0-9_]+$`)
	seen := map[string]bool{}
	reg := prometheus.NewRegistry()
	for _, f := range All {
		switch {
		case !name.MatchString(f.Name) || seen[f.Name]:
			t.Errorf("%s: not a gcsfuse_csi_ name, or declared twice", f.Name)
		case f.Help == "" || f.Exporter == "":
			t.Errorf("%s: no help or exporter", f.Name)
		case (f.Kind == Counter) != strings.HasSuffix(f.Name, "_total"):
			t.Errorf("%s: a %s; counters, and only they, end in _total", f.Name, f.Kind)
		case (f.Kind == Histogram) != (len(f.Buckets) > 0):
			t.Errorf("%s: a %s with buckets %v", f.Name, f.Kind, f.Buckets)
		}
		seen[f.Name] = true
		var c prometheus.Collector
		switch vec := len(f.Labels) > 0; {
		case f.Kind == Counter && vec:
			c = f.NewCounterVec()
		case f.Kind == Counter:
			c = f.NewCounter()
		case f.Kind == Gauge && vec:
			c = f.NewGaugeVec()
		case f.Kind == Gauge:
			c = f.NewGauge()
		case f.Kind == Histogram && vec:
			c = f.NewHistogramVec()
		case f.Kind == Histogram:
			c = f.NewHistogram()
		default:
			t.Fatalf("%s: kind %q", f.Name, f.Kind)
		}
		if err := reg.Register(c); err != nil {
			t.Errorf("%s: %v", f.Name, err)
		}
	}
	if len(All) < 20 {
		t.Errorf("%d families, want the node plugin's 20 at least", len(All))
	}
}

// A family used as another kind, or without its labels, is a programming error the first
// test that builds it catches.
func TestMisuse(t *testing.T) {
	for _, use := range []func(){
		func() { PodsDone.NewCounter() },         // has labels
		func() { SidecarFailures.NewGauge() },    // a counter
		func() { VolumeReady.NewHistogramVec() }, // no labels
		func() { PodsTracked.NewDesc() },         // no labels
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a misuse did not panic")
				}
			}()
			use()
		}()
	}
}
