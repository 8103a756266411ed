package main

import (
	"testing"
	"time"
)

// A round's steps from the bench's marks and the sidecar's log lines; a round whose log
// misses a mark is left out, not counted as zero.
func TestMountPhases(t *testing.T) {
	at := func(ms int) time.Time {
		return time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	}
	line := func(ms int, rest string) string {
		return "time=" + at(ms).Format(time.RFC3339Nano) + " level=INFO " + rest + "\n"
	}
	out := line(30, `msg="sidecar ready" mode=native`) +
		line(37, `msg="gcsfuse started" volume=v0`) +
		line(107, `msg=gcsfuse volume=v0 severity=INFO msg="Start gcsfuse/3.13.0 (Go version go1.27.2)"`) +
		line(118, `msg=gcsfuse volume=v0 severity=INFO msg="File system has been successfully mounted."`)
	tl := mountTimeline{t0: at(0), publishDone: at(2), sidecarStart: at(3), ready: at(120), output: out}
	got, ok := tl.phases()
	if !ok {
		t.Fatal("a round with every mark was left out")
	}
	want := []time.Duration{2, 27, 7, 70, 11, 2}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Errorf("%s = %s, want %d ms", mountPhases[i].name, got[i], want[i])
		}
	}
	tl.output = line(30, `msg="sidecar ready"`)
	if _, ok := tl.phases(); ok {
		t.Error("a round without gcsfuse's lines counted")
	}
	if p := printPhases([]mountTimeline{tl}); p != nil {
		t.Errorf("p50s %v from no complete round", p)
	}
}
