package sidecarrule

import (
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestDrainDecision(t *testing.T) {
	native := DrainInputs{Mode: contract.ModeNative, Enabled: true}
	nativeInit := DrainInputs{Mode: contract.ModeNative, Enabled: true, InitContainers: []string{"prep", "load"}}
	legacy := DrainInputs{Mode: contract.ModeLegacy, Enabled: true}
	with := func(in DrainInputs, serving int, initDone bool) DrainInputs {
		in.Serving, in.InitDone = serving, initDone
		return in
	}
	for _, tt := range []struct {
		name  string
		in    DrainInputs
		drain bool
		why   string
	}{
		{"legacy drains", with(legacy, 1, false), true, "legacy"},
		{"legacy with nothing serving stops", with(legacy, 0, false), false, "nothing to drain"},
		{"shared mounter drains until its mounts are gone", DrainInputs{Mode: contract.ModeShared, Enabled: true, Serving: 3}, true, "shared mounter"},
		{"shared mounter with nothing serving stops", DrainInputs{Mode: contract.ModeShared, Enabled: true}, false, "nothing to drain"},
		{"native stops at once", with(native, 2, false), false, "native"},
		{"native with init containers drains", with(nativeInit, 1, false), true, "prep,load"},
		{"native after the init phase stops", with(nativeInit, 1, true), false, "init phase over"},
		{"native with init containers but nothing serving stops", with(nativeInit, 0, false), false, "nothing to drain"},
		{"drain disabled: legacy stops", DrainInputs{Mode: contract.ModeLegacy, Serving: 1}, false, "disabled"},
		{"drain disabled: native in init phase stops", DrainInputs{Mode: contract.ModeNative, InitContainers: []string{"x"}, Serving: 1}, false, "disabled"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			drain, why := DrainDecision(tt.in)
			if drain != tt.drain || !strings.Contains(why, tt.why) {
				t.Fatalf("DrainDecision = %v %q; want %v and a reason containing %q", drain, why, tt.drain, tt.why)
			}
		})
	}
}

// The drain ends exactly when the kubelet would kill the app (no margin), from the
// deletion's grace when the node plugin wrote it, else the spec's, never under 2 s.
// StopGrace, which also bounds the legacy sidecar's preStop wait, is that grace.
func TestDrainDeadline(t *testing.T) {
	sig := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	term := func(n int64) *time.Duration { d := time.Duration(n) * time.Second; return &d }
	for _, tt := range []struct {
		name     string
		spec     time.Duration
		deletion *time.Duration
		want     time.Duration
		source   GraceSource
	}{
		{"spec grace, no file", 30 * time.Second, nil, 30 * time.Second, GraceFromSpec},
		{"longer deletion grace", 2 * time.Second, term(45), 45 * time.Second, GraceFromFile},
		{"shorter deletion grace", 30 * time.Second, term(5), 5 * time.Second, GraceFromFile},
		{"force delete: the kubelet still gives 2 s", 30 * time.Second, term(0), 2 * time.Second, GraceFromFile},
		{"spec under the kubelet minimum", time.Second, nil, 2 * time.Second, GraceFromSpec},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, grace, source := DrainDeadline(sig, tt.spec, tt.deletion)
			if !d.Equal(sig.Add(tt.want)) || grace != tt.want || source != tt.source {
				t.Fatalf("DrainDeadline = %s after SIGTERM, grace %s from %q; want %s from %q", d.Sub(sig), grace, source, tt.want, tt.source)
			}
			if grace, source := StopGrace(tt.spec, tt.deletion); grace != tt.want || source != tt.source {
				t.Fatalf("StopGrace = %s from %q; want %s from %q", grace, source, tt.want, tt.source)
			}
		})
	}
}
