package quantile

import (
	"testing"
	"time"
)

func TestNearest(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i)*time.Second)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * time.Second}, {0.9, 90 * time.Second}, {0.99, 99 * time.Second}, {1, 100 * time.Second}, {0.001, time.Second}} {
		if got := Nearest(hundred, tc.p); got != tc.want {
			t.Errorf("Nearest(1..100 s, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	// Nearest rank on few samples: p50 of 4 is the 2nd, p90 and p99 of 4 the 4th.
	four := []int{10, 20, 30, 40}
	if got := Nearest(four, 0.5); got != 20 {
		t.Errorf("p50 of %v = %d, want 20", four, got)
	}
	if got := Nearest(four, 0.9); got != 40 {
		t.Errorf("p90 of %v = %d, want 40", four, got)
	}
	if got := Nearest([]int{7}, 0.5); got != 7 {
		t.Errorf("p50 of one sample = %d, want 7", got)
	}
	if got := Nearest([]int(nil), 0.5); got != 0 {
		t.Errorf("p50 of nothing = %d, want 0", got)
	}
}
