package expiring

import (
	"testing"
	"time"
)

func TestAddForgetsAfterTTL(t *testing.T) {
	s := New[string](time.Minute)
	t0 := time.Now()
	if !s.Add("a", t0) || s.Add("a", t0.Add(30*time.Second)) {
		t.Fatal("a second Add within the ttl must report a known member")
	}
	if !s.Add("b", t0.Add(time.Second)) {
		t.Fatal("another member is new")
	}
	if !s.Add("a", t0.Add(61*time.Second)) {
		t.Fatal("a member older than the ttl must be forgotten")
	}
	if len(s.at) != 2 {
		t.Fatalf("%d members kept, want 2 (a again, b)", len(s.at))
	}
	s.Add("c", t0.Add(5*time.Minute))
	if len(s.at) != 1 {
		t.Fatalf("%d members kept after every other expired, want 1", len(s.at))
	}
}
