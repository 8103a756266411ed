package sidecarmounter

import (
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
)

// The sidecar's refusal and drain reach the user as Events; a drain reaches the
// OnTerminating hook each time (the node plugin's record tells the first), and its Event
// is recorded when the hook says it is the pod's first.
func TestOnStatusRefusedAndTerminating(t *testing.T) {
	var hooked []nodevolume.PodRef
	rec := &podevents.Recorder{}
	s := newTestMounter(t, Config{OnTerminating: func(p nodevolume.PodRef) bool { hooked = append(hooked, p); return len(hooked) == 1 }, Events: rec})
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	vol := handoff.Volume{VolumeName: "data", Bucket: "bkt"}
	log := s.cfg.Log

	s.onStatus(pod, vol, &handoff.Status{State: handoff.StateRefused, Message: "flag --foo is not allowed"}, log)
	s.onStatus(pod, vol, &handoff.Status{State: handoff.StateTerminating}, log)
	// The drain's Event comes with the pod's first report, not a later one: a pod with one
	// volume reports once.
	if got := rec.Count(contract.EventSidecarDraining); got != 1 {
		t.Fatalf("SidecarDraining Events after the pod's first drain report: %d, want 1", got)
	}
	s.onStatus(pod, handoff.Volume{VolumeName: "logs", Bucket: "b2"}, &handoff.Status{State: handoff.StateTerminating}, log)
	s.onStatus(pod, vol, &handoff.Status{State: "from-the-future"}, log)

	if len(rec.Events()) != 2 {
		t.Fatalf("events = %+v, want a refusal and one drain", rec.Events())
	}
	r := rec.Events()[0]
	if !r.Warning || r.Reason != contract.EventHandoffRefused || r.Pod != pod ||
		!strings.Contains(r.Msg, "data") || !strings.Contains(r.Msg, "bkt") || !strings.Contains(r.Msg, "flag --foo is not allowed") {
		t.Errorf("refusal event = %+v", r)
	}
	d := rec.Events()[1]
	if d.Warning || d.Reason != contract.EventSidecarDraining || d.Pod != pod {
		t.Errorf("drain event = %+v", d)
	}
	if len(hooked) != 2 || hooked[0] != pod {
		t.Errorf("OnTerminating calls = %+v, want 2 for %+v", hooked, pod)
	}
}

// gcsfuse's death reaches the pod as a GcsfuseExited Warning that names the volume once: a
// sidecar's message that already starts with it is kept as it is, an older sidecar's that
// does not gets it in front.
func TestOnStatusExitedNamesTheVolumeOnce(t *testing.T) {
	rec := &podevents.Recorder{}
	s := newTestMounter(t, Config{Events: rec})
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	vol := handoff.Volume{VolumeName: "data", Bucket: "bkt"}
	named := `volume data (bucket "bkt"): gcsfuse died (signal: killed)`
	s.onStatus(pod, vol, &handoff.Status{State: handoff.StateExited, Message: named}, s.cfg.Log)
	s.onStatus(pod, vol, &handoff.Status{State: handoff.StateExited, Message: "gcsfuse died (exit status 2)"}, s.cfg.Log)
	ev := rec.Events()
	if len(ev) != 2 {
		t.Fatalf("events = %+v, want two GcsfuseExited", ev)
	}
	for i, want := range []string{named, "volume data: gcsfuse died (exit status 2)"} {
		if !ev[i].Warning || ev[i].Reason != contract.EventGcsfuseExited || ev[i].Msg != want {
			t.Errorf("event %d = %+v, want a GcsfuseExited Warning %q", i, ev[i], want)
		}
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

// A sidecar of the previous release refuses a version-2 volume naming a field it does not
// know; the Event says what that means and what to do.
func TestRefusalOfANetworkVolumeSaysWhy(t *testing.T) {
	rec := &podevents.Recorder{}
	s := newTestMounter(t, Config{Events: rec})
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	old := "hand-off refused: decode hand-off payload: json: unknown field \"httpsProxy\""
	s.onStatus(pod, handoff.Volume{Version: handoff.VersionNetwork, VolumeName: "data", Bucket: "bkt", HTTPSProxy: "http://p:1"},
		&handoff.Status{State: handoff.StateRefused, Message: old}, s.cfg.Log)
	s.onStatus(pod, handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"},
		&handoff.Status{State: handoff.StateRefused, Message: "flag --foo is not allowed"}, s.cfg.Log)
	if len(rec.Events()) != 2 || rec.Events()[0].Reason != contract.EventHandoffRefused {
		t.Fatalf("events = %+v", rec.Events())
	}
	if m := rec.Events()[0].Msg; !strings.Contains(m, old) || !strings.Contains(m, "proxy or CA bundle") || !strings.Contains(m, "recreate the pod") {
		t.Errorf("refusal of a version-2 volume: %q", m)
	}
	if m := rec.Events()[1].Msg; strings.Contains(m, "recreate the pod") {
		t.Errorf("a refusal of a version-1 volume got the hint: %q", m)
	}
}
