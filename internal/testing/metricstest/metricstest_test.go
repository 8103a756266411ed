package metricstest

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func TestSum(t *testing.T) {
	series := func(v float64, kv ...string) *dto.Metric {
		m := &dto.Metric{Counter: &dto.Counter{Value: proto.Float64(v)}}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(kv[i]), Value: proto.String(kv[i+1])})
		}
		return m
	}
	mf := &dto.MetricFamily{Metric: []*dto.Metric{series(2, "pod", "a", "volume", "x"), series(3, "pod", "a", "volume", "y"), series(5, "pod", "b")}}
	if sum, n := Sum(mf, map[string]string{"pod": "a"}); sum != 5 || n != 2 {
		t.Fatalf("pod a: %v, %d", sum, n)
	}
	if sum, n := Sum(mf, nil); sum != 10 || n != 3 {
		t.Fatalf("all: %v, %d", sum, n)
	}
	if sum, n := Sum(nil, nil); sum != 0 || n != 0 {
		t.Fatalf("nil family: %v, %d", sum, n)
	}
}
