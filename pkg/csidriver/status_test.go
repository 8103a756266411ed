package csidriver

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
)

type event struct {
	pod     PodRef
	warning bool
	reason  string
	msg     string
}

type recordedEvents struct {
	mu     sync.Mutex
	events []event
}

func (r *recordedEvents) PodEvent(pod PodRef, warning bool, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{pod, warning, reason, msg})
}

// The sidecar's refusal and drain reach the user as Events; a drain reaches the
// OnTerminating hook each time (the node plugin's record tells the first), and its Event
// is recorded when the hook says it is the pod's first.
func TestOnStatusRefusedAndTerminating(t *testing.T) {
	var hooked []PodRef
	rec := &recordedEvents{}
	s := mustNodeServer(Config{NodeID: "n1", KubeletRoot: root, OnTerminating: func(p PodRef) bool { hooked = append(hooked, p); return len(hooked) == 1 }},
		rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pod := PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	vol := handoff.Volume{VolumeName: "data", Bucket: "bkt"}
	log := s.log

	s.onStatus(pod, vol, &handoff.Status{State: handoff.StateRefused, Message: "flag --foo is not allowed"}, log)
	s.onStatus(pod, vol, &handoff.Status{State: handoff.StateTerminating}, log)
	s.onStatus(pod, handoff.Volume{VolumeName: "logs", Bucket: "b2"}, &handoff.Status{State: handoff.StateTerminating}, log)
	s.onStatus(pod, vol, &handoff.Status{State: "from-the-future"}, log)

	if len(rec.events) != 2 {
		t.Fatalf("events = %+v, want a refusal and one drain", rec.events)
	}
	r := rec.events[0]
	if !r.warning || r.reason != contract.EventHandoffRefused || r.pod != pod ||
		!strings.Contains(r.msg, "data") || !strings.Contains(r.msg, "bkt") || !strings.Contains(r.msg, "flag --foo is not allowed") {
		t.Errorf("refusal event = %+v", r)
	}
	d := rec.events[1]
	if d.warning || d.reason != contract.EventSidecarDraining || d.pod != pod {
		t.Errorf("drain event = %+v", d)
	}
	if len(hooked) != 2 || hooked[0] != pod {
		t.Errorf("OnTerminating calls = %+v, want 2 for %+v", hooked, pod)
	}
}

// A sidecar's refusal gets the upgrade hint only when the volume needed a newer hand-off
// than version 1 and the refusal is the old sidecar's (a field it does not know): a
// version-1 volume refused for any reason, or a newer one refused for another, gets none.
func TestRefusedHint(t *testing.T) {
	for _, tc := range []struct {
		version int
		msg     string
		hint    bool
	}{
		{handoff.VersionNetwork, `json: unknown field "proxy"`, true},
		{handoff.VersionNetwork, "unsupported hand-off version 2", true},
		{handoff.VersionNetwork, "bucket not found", false},
		{handoff.Version, `json: unknown field "x"`, false},
		{handoff.Version, "unsupported hand-off version 1", false},
	} {
		got := refusedHint(handoff.Volume{Version: tc.version}, tc.msg)
		if (got != "") != tc.hint || tc.hint && !strings.Contains(got, "recreate the pod") {
			t.Errorf("version %d, %q: hint %q, want one: %v", tc.version, tc.msg, got, tc.hint)
		}
	}
}
