package csidriver

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
)

// Node calls are timed by method and code, sidecar reports become ready samples and failure
// counts, and the published volumes are exported.
func TestMetricsRecordCallsAndStatuses(t *testing.T) {
	reg := prometheus.NewRegistry()
	var s *NodeServer
	m, err := NewMetrics(reg, func() int { return s.PublishedVolumes() })
	if err != nil {
		t.Fatal(err)
	}
	s = mustNodeServer(Config{NodeID: "n1", KubeletRoot: root, Metrics: m}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.store.Remember("/t1", nodevolume.Publication{})

	if _, err := s.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{}); err == nil {
		t.Fatal("an empty request was accepted")
	}
	if _, err := s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{}); err == nil {
		t.Fatal("an empty request was accepted")
	}
	if n := testutil.CollectAndCount(m.calls); n != 2 {
		t.Errorf("%d call series, want NodePublishVolume and NodeUnpublishVolume", n)
	}
	if c := histCount(t, m.calls.WithLabelValues("NodePublishVolume", "InvalidArgument")); c != 1 {
		t.Errorf("NodePublishVolume InvalidArgument count %d", c)
	}

	published := time.Now().Add(-300 * time.Millisecond)
	m.Status(&handoff.Status{State: handoff.StateStarted}, published)
	m.Status(&handoff.Status{State: handoff.StateExited}, published)
	m.Status(&handoff.Status{State: handoff.StateFailed}, published)
	m.Status(&handoff.Status{State: handoff.StateRefused}, published)
	if c := histCount(t, m.ready); c != 1 {
		t.Errorf("ready samples %d, want 1", c)
	}
	for _, r := range []string{FailureStart, FailureExited, FailureRefused} {
		if v := testutil.ToFloat64(m.failures.WithLabelValues(r)); v != 1 {
			t.Errorf("failures{reason=%s} = %v", r, v)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == metricscatalog.VolumesPublished.Name {
			found = true
			if v := mf.Metric[0].GetGauge().GetValue(); v != 1 {
				t.Errorf("%s = %v, want 1", metricscatalog.VolumesPublished.Name, v)
			}
		}
	}
	if !found {
		t.Errorf("%s not exported", metricscatalog.VolumesPublished.Name)
	}
	// Without a count of published volumes, the gauge is left out (and a scrape works).
	reg = prometheus.NewRegistry()
	if _, err := NewMetrics(reg, nil); err != nil {
		t.Fatal(err)
	}
	if mfs, err = reg.Gather(); err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metricscatalog.VolumesPublished.Name {
			t.Errorf("%s exported without a count", mf.GetName())
		}
	}
}

func histCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	c, ok := o.(prometheus.Metric)
	if !ok {
		t.Fatal("not a metric")
	}
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}
