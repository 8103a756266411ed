package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
)

// The Grafana dashboard queries only metrics that exist (a rename breaks this test, not a
// panel at 3 a.m.), and docs/metrics.md describes each of its panels.
func TestDashboardUsesExistingMetricsAndIsDocumented(t *testing.T) {
	// The catalog of the node plugin's own families, gcsfuse's it re-exports, and the
	// process collector's.
	known := map[string]bool{"process_resident_memory_bytes": true, "process_cpu_seconds_total": true}
	for _, f := range metricscatalog.All {
		known[f.Name] = true
	}
	for name := range gcsfusemetrics.Families {
		known[name] = true
	}
	data, err := os.ReadFile("../../deploy/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Type, Title, Description string
			Targets                  []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	readme, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(readme), "## The Grafana dashboard")
	if !found {
		t.Fatal("docs/metrics.md has no \"## The Grafana dashboard\" section")
	}
	metric := regexp.MustCompile(`\b(gcsfuse_[a-z0-9_]+|process_[a-z_]+)`)
	panels := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		if p.Description == "" {
			t.Errorf("panel %q has no description", p.Title)
		}
		if !strings.Contains(section, "**"+p.Title+"**") {
			t.Errorf("docs/metrics.md's dashboard section does not describe panel **%s**", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllString(tg.Expr, -1) {
				base := m
				for _, suf := range []string{"_bucket", "_count", "_sum"} {
					if !known[base] && strings.HasSuffix(base, suf) && known[strings.TrimSuffix(base, suf)] {
						base = strings.TrimSuffix(base, suf)
					}
				}
				if !known[base] {
					t.Errorf("panel %q queries %s, which no component exports", p.Title, m)
				}
			}
		}
	}
	if panels < 10 {
		t.Errorf("%d panels", panels)
	}
}
