package podwatch

import (
	"context"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the metrics twice on one registry succeeded, want an error")
	}
	m.ObserveExitLatency(contract.ModeLegacy, 300*time.Millisecond)
	m.ObserveExitLatency(contract.ModeLegacy, -time.Second)

	h := findMetric(t, reg, metricscatalog.ExitLatency.Name, map[string]string{"mode": contract.ModeLegacy}).GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 0.3 {
		t.Errorf("histogram count=%d sum=%v, want 2 and 0.3", h.GetSampleCount(), h.GetSampleSum())
	}
	b := h.GetBucket()
	if len(b) == 0 || b[0].GetUpperBound() != 0.01 || b[len(b)-1].GetUpperBound() != 60 {
		t.Errorf("buckets %v, want 0.01 .. 60", b)
	}
	for _, bk := range b {
		if bk.GetUpperBound() == 0.25 && bk.GetCumulativeCount() != 1 {
			t.Errorf("le=0.25 bucket = %d, want 1 (the clamped negative observation)", bk.GetCumulativeCount())
		}
	}

	var nilMetrics *Metrics
	nilMetrics.ObserveExitLatency(contract.ModeNative, time.Second) // must not panic
	nilMetrics.PodDone(lifecycle.RuleNeverAllTerminated)
	nilMetrics.SidecarFailure()
}

func TestNewEventRecorder(t *testing.T) {
	client := fake.NewClientset()
	events, err := client.CoreV1().Events(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer events.Stop()
	rec, stop := NewEventRecorder(client, node)
	defer stop()

	pod := jobPod("p", "uid-ev", node)
	rec.Event(pod, corev1.EventTypeWarning, contract.EventSidecarFailed, "gcsfuse exited with code 1: auth failed")

	select {
	case e := <-events.ResultChan():
		ev, ok := e.Object.(*corev1.Event)
		if !ok {
			t.Fatalf("watch delivered %T", e.Object)
		}
		if ev.Source.Component != EventComponent || ev.Source.Host != node || ev.Reason != contract.EventSidecarFailed ||
			ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.UID != "uid-ev" || ev.InvolvedObject.Kind != "Pod" ||
			ev.InvolvedObject.Name != "p" || ev.Namespace != ns {
			t.Errorf("event = %+v", ev)
		}
	case <-time.After(deadline):
		t.Fatalf("no Event written within %s", deadline)
	}
}

func findMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return nil
}
