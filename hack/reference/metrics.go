package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podmetrics"
)

// metrics lists the node plugin's own families (pkg/metricscatalog, the one declaration the
// collectors are built from) and gcsfuse's it re-exports per volume (gcsfusemetrics.Families).
func (g *gen) metrics() error {
	g.p("")
	g.p("## Metrics")
	g.p("")
	g.p("What the node plugin serves on `--metrics-addr` (the chart's `node.metricsPort`), besides")
	g.p("`process_*` and `go_*` ([metrics](metrics.md) says how to scrape it and what the dashboard")
	g.p("shows). Its own families, from `pkg/metricscatalog`:")
	g.p("")
	g.header("family", "type", "labels", "served by", "what")
	if len(metricscatalog.All) == 0 {
		return errors.New("metricscatalog.All is empty")
	}
	for _, f := range metricscatalog.All {
		what := f.Help
		if f.Kind == metricscatalog.Histogram {
			what += fmt.Sprintf(" Buckets: %v.", f.Buckets)
		}
		g.row(code(f.Name), string(f.Kind), codes(f.Labels), f.Exporter, md(what))
	}
	g.p("")
	g.p("Every volume's gcsfuse, collected from its sidecar (or the node's mounter) at each scrape,")
	g.p("with the labels `" + podmetrics.LabelNamespace + "`, `" + podmetrics.LabelPod + "`, `" + gcsfusemetrics.LabelVolume + "` and `" + gcsfusemetrics.LabelBucket + "` added (`pkg/gcsfusemetrics`):")
	g.p("")
	g.header("family", "type", "gcsfuse's labels kept", "what")
	for _, name := range slices.Sorted(maps.Keys(gcsfusemetrics.Families)) {
		f := gcsfusemetrics.Families[name]
		g.row(code(name), strings.ToLower(f.Type.String()), codes(f.Labels), md(f.Help))
	}
	g.p("")
	g.p("The controller serves, on its `--metrics-addr` (the chart's `controller.metricsPort`), the")
	g.p("provisioning library's families (sig-storage-lib-external-provisioner), as `pkg/metricscatalog`")
	g.p("declares them:")
	g.p("")
	g.header("family", "type", "labels", "what")
	for _, f := range metricscatalog.ControllerFamilies {
		what := f.Help
		if f.Kind == metricscatalog.Histogram {
			what += fmt.Sprintf(" Buckets: %v.", f.Buckets)
		}
		g.row(code(f.Name), string(f.Kind), codes(f.Labels), md(what))
	}
	return nil
}
