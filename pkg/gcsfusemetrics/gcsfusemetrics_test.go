package gcsfusemetrics

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
)

func addPrefix(n string) string { return Prefix + n }

func find(mfs []*dto.MetricFamily, name string) *dto.MetricFamily {
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, lp := range m.GetLabel() {
		parts = append(parts, lp.GetName()+"="+lp.GetValue())
	}
	return strings.Join(parts, ",")
}

// gcsfuse v3.13.0's real output (a 5000-byte object written, then read twice through the file
// cache): only the listed families leave, histograms summed over their op label.
func TestReduceRealGcsfuseOutput(t *testing.T) {
	f, err := os.Open("testdata/gcsfuse-v3.13.0.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	out := Reduce(in, addPrefix)
	for _, mf := range out {
		if _, ok := Families[mf.GetName()]; !ok {
			t.Errorf("family %s is not in Families", mf.GetName())
		}
	}
	if find(out, "gcsfuse_go_goroutines") != nil || find(out, "go_goroutines") != nil {
		t.Error("Go runtime series left the pod")
	}
	rb := find(out, Prefix+"gcs_read_bytes_count")
	if rb == nil || len(rb.Metric) != 1 || rb.Metric[0].GetCounter().GetValue() != 5000 {
		t.Fatalf("gcs_read_bytes_count = %v, want one series of 5000", rb)
	}
	ops := find(out, Prefix+"fs_ops_count")
	if ops == nil || len(ops.Metric) < 5 {
		t.Fatalf("fs_ops_count: %v", ops)
	}
	for _, m := range ops.Metric {
		if labels(m) == "" || !strings.HasPrefix(labels(m), "fs_op=") {
			t.Errorf("fs_ops_count series with labels %q", labels(m))
		}
	}
	lat := find(out, Prefix+"fs_ops_latencies")
	if lat == nil || len(lat.Metric) != 1 || len(lat.Metric[0].GetLabel()) != 0 {
		t.Fatalf("fs_ops_latencies not summed into one series: %v", lat)
	}
	var want uint64
	for _, m := range in["fs_ops_latencies"].GetMetric() {
		want += m.GetHistogram().GetSampleCount()
	}
	if got := lat.Metric[0].GetHistogram().GetSampleCount(); got != want || want == 0 {
		t.Errorf("summed fs_ops_latencies count = %d, want %d", got, want)
	}
	if fc := find(out, Prefix+"file_cache_read_bytes_count"); fc == nil {
		t.Error("file cache bytes missing")
	}
	var buf bytes.Buffer
	if err := Write(&buf, out); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(&buf); err != nil {
		t.Fatalf("written output does not parse: %v", err)
	}
}

// What a hostile sidecar could send: unknown families, wrong types, odd label values,
// missing required labels, endless series. None of it grows the output.
func TestReduceBoundsHostileInput(t *testing.T) {
	var b strings.Builder
	b.WriteString("# TYPE gcsfuse_evil counter\ngcsfuse_evil{volume=\"v\",bucket=\"b\"} 1\n")
	b.WriteString("# TYPE gcsfuse_gcs_read_bytes_count gauge\ngcsfuse_gcs_read_bytes_count{volume=\"v\",bucket=\"b\"} 1\n")
	b.WriteString("# TYPE gcsfuse_fs_ops_count counter\n")
	b.WriteString("gcsfuse_fs_ops_count{volume=\"v\",bucket=\"b\",fs_op=\"a b\"} 1\n") // invalid value
	b.WriteString("gcsfuse_fs_ops_count{bucket=\"b\",fs_op=\"ReadFile\"} 1\n")         // no volume
	b.WriteString("gcsfuse_fs_ops_count{volume=\"v\",bucket=\"b\",fs_op=\"ReadFile\",extra=\"x1\"} 2\n")
	b.WriteString("gcsfuse_fs_ops_count{volume=\"v\",bucket=\"b\",fs_op=\"ReadFile\",extra=\"x2\"} 3\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "gcsfuse_fs_ops_count{volume=\"v\",bucket=\"b\",fs_op=\"op%04d\"} 1\n", i)
	}
	in, err := Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	out := Reduce(in, func(n string) string { return n }, LabelVolume, LabelBucket)
	if len(out) != 1 || out[0].GetName() != Prefix+"fs_ops_count" {
		t.Fatalf("families out: %v", out)
	}
	ops := out[0].Metric
	if len(ops) != MaxSeriesPerFamily {
		t.Fatalf("%d series, want the cap %d", len(ops), MaxSeriesPerFamily)
	}
	for _, m := range ops {
		if labels(m) == "volume=v,bucket=b,fs_op=ReadFile" && m.GetCounter().GetValue() != 5 {
			t.Errorf("ReadFile series with an extra label not merged: %v", m.GetCounter().GetValue())
		}
		if strings.Contains(labels(m), "extra") || strings.Contains(labels(m), "a b") {
			t.Errorf("series kept with labels %s", labels(m))
		}
	}
}

func TestParseRefusesOversizedResponse(t *testing.T) {
	big := strings.Repeat("# padding comment line to exceed the limit\n", MaxBytes/40+10)
	if _, err := Parse(strings.NewReader(big)); err == nil {
		t.Fatal("Parse read more than MaxBytes")
	}
}

// The node plugin and the sidecar speak delimited protobuf: the same series come back.
func TestProtobufRoundTrip(t *testing.T) {
	f, err := os.Open("testdata/gcsfuse-v3.13.0.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	out := Reduce(in, addPrefix)
	format := expfmt.NewFormat(expfmt.TypeProtoDelim)
	var buf bytes.Buffer
	if err := Encode(&buf, format, out); err != nil {
		t.Fatal(err)
	}
	back, err := Decode(&buf, format)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(out) {
		t.Fatalf("%d families back, %d sent", len(back), len(out))
	}
	if v := back[Prefix+"gcs_read_bytes_count"].Metric[0].GetCounter().GetValue(); v != 5000 {
		t.Errorf("read bytes %v after the round trip", v)
	}
	// Too many families: refused.
	buf.Reset()
	var many []*dto.MetricFamily
	for i := range MaxFamilies + 1 {
		many = append(many, &dto.MetricFamily{Name: proto.String(fmt.Sprintf("f%d", i)), Type: dto.MetricType_GAUGE.Enum(),
			Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(1)}}}})
	}
	if err := Encode(&buf, format, many); err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(&buf, format); err == nil {
		t.Error("more than MaxFamilies families decoded")
	}
}
