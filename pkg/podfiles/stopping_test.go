package podfiles

import (
	"os"
	"testing"
	"time"
)

// The stopping record round-trips, is gone once removed, and a garbled one still says
// "stopping" (the node plugin then refuses rather than hand a mount to a process about to
// end).
func TestMounterStopping(t *testing.T) {
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if stopping, _, err := ReadMounterStopping(dir); stopping || err != nil {
		t.Fatalf("no record: stopping %v, %v", stopping, err)
	}
	deadline := time.Now().Add(5 * time.Minute).Truncate(time.Millisecond)
	if err := WriteMounterStopping(dir, deadline); err != nil {
		t.Fatal(err)
	}
	stopping, got, err := ReadMounterStopping(dir)
	if !stopping || err != nil || !got.Equal(deadline) {
		t.Fatalf("record: stopping %v until %v (%v), want until %v", stopping, got, err, deadline)
	}
	if err := RemoveMounterStopping(dir); err != nil {
		t.Fatal(err)
	}
	if err := RemoveMounterStopping(dir); err != nil {
		t.Fatalf("removing a missing record: %v", err)
	}
	if stopping, _, _ := ReadMounterStopping(dir); stopping {
		t.Fatal("stopping after the record was removed")
	}
	if err := os.WriteFile(dir.Name()+"/"+MounterStoppingFile, []byte("soon"), 0o644); err != nil {
		t.Fatal(err)
	}
	if stopping, got, err := ReadMounterStopping(dir); !stopping || !got.IsZero() || err != nil {
		t.Fatalf("garbled record: stopping %v until %v (%v), want stopping, no deadline", stopping, got, err)
	}
}
