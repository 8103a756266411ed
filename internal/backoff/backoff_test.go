package backoff

import (
	"slices"
	"testing"
	"time"
)

func TestDoublingCapsAndStays(t *testing.T) {
	b := Doubling(10*time.Millisecond, 50*time.Millisecond)
	var got []time.Duration
	for range 6 {
		got = append(got, b.Step())
	}
	want := []time.Duration{10, 20, 40, 50, 50, 50}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
}
