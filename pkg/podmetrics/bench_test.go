package podmetrics

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// sidecarOutput is what a sidecar with the given volumes serves, from gcsfuse v3.13.0's real
// output.
func sidecarOutput(tb testing.TB, volumes ...string) string {
	f, err := os.Open("../gcsfusemetrics/testdata/gcsfuse-v3.13.0.txt")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	raw, err := gcsfusemetrics.Parse(f)
	if err != nil {
		tb.Fatal(err)
	}
	var sets [][]*dto.MetricFamily
	for _, v := range volumes {
		mfs := gcsfusemetrics.Reduce(raw, func(n string) string { return gcsfusemetrics.Prefix + n })
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				m.Label = append([]*dto.LabelPair{
					{Name: proto.String(gcsfusemetrics.LabelVolume), Value: proto.String(v)},
					{Name: proto.String(gcsfusemetrics.LabelBucket), Value: proto.String("bucket-" + v)},
				}, m.Label...)
			}
		}
		sets = append(sets, mfs)
	}
	var buf bytes.Buffer
	if err := gcsfusemetrics.Write(&buf, gcsfusemetrics.Merge(sets)); err != nil {
		tb.Fatal(err)
	}
	return buf.String()
}

// One scrape of a node with 110 pods of 2 volumes each (the kubelet's default maxPods): what
// the node plugin spends per scrape, and how many series it serves.
func BenchmarkGather110Pods(b *testing.B) {
	root, err := os.MkdirTemp("", "pmb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	body := sidecarOutput(b, "in", "out")
	var pods []Pod
	for i := range 110 {
		uid := fmt.Sprintf("uid-%03d", i)
		serveSidecar(b, podfiles.At(tmpDir(b, root, uid)).MetricsSocket(), body)
		pods = append(pods, Pod{UID: uid, Namespace: "ns", Name: "pod-" + uid, Volumes: []string{"in", "out"}})
	}
	c, err := New(Config{KubeletRoot: root, Pods: func() []Pod { return pods }}, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	mfs, _ := c.Gather()
	series := 0
	for _, mf := range mfs {
		series += len(mf.Metric)
	}
	if series == 0 {
		b.Fatal("no series")
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = c.Gather()
	}
	b.ReportMetric(float64(series), "series")
}
