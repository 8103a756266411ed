package sidecarmounter

import (
	"strings"
	"sync"
	"testing"
	"time"

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

// gcsfuse's start is a Normal GcsfuseStarted Event saying how long it took; its failure to
// start a GcsfuseFailed Warning naming the volume, its bucket, the identity that reads it
// (when there is one) and the sidecar's message. Each is on the volume's pod.
func TestOnStatusStartedAndFailed(t *testing.T) {
	rec := &podevents.Recorder{}
	s := newTestMounter(t, Config{Events: rec})
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	vol := handoff.Volume{VolumeName: "data", Bucket: "bkt"}
	withID := handoff.Volume{VolumeName: "data", Bucket: "bkt", Identity: "ksa ns/reader"}
	s.onStatus(pod, vol, &handoff.Status{State: handoff.StateStarted, ElapsedMillis: 120}, s.cfg.Log)
	s.onStatus(pod, withID, &handoff.Status{State: handoff.StateFailed, Message: "bucket not found"}, s.cfg.Log)
	s.onStatus(pod, vol, &handoff.Status{State: handoff.StateFailed, Message: "bucket not found"}, s.cfg.Log)
	want := []podevents.Event{
		{Pod: pod, Reason: contract.EventGcsfuseStarted, Msg: "volume data: gcsfuse serving after 120 ms"},
		{Pod: pod, Warning: true, Reason: contract.EventGcsfuseFailed, Msg: "volume data (bucket bkt, identity ksa ns/reader): gcsfuse failed to start: bucket not found"},
		{Pod: pod, Warning: true, Reason: contract.EventGcsfuseFailed, Msg: "volume data (bucket bkt): gcsfuse failed to start: bucket not found"},
	}
	got := rec.Events()
	if len(got) != len(want) {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A refusal's Warning names the volume, its bucket, the sidecar container and the reason,
// in that order.
func TestOnStatusRefusedMessage(t *testing.T) {
	rec := &podevents.Recorder{}
	s := newTestMounter(t, Config{Events: rec})
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	s.onStatus(pod, handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"},
		&handoff.Status{State: handoff.StateRefused, Message: "flag --foo is not allowed"}, s.cfg.Log)
	want := podevents.Event{Pod: pod, Warning: true, Reason: contract.EventHandoffRefused,
		Msg: "volume data (bucket bkt): " + contract.SidecarContainerName + " refused the volume: flag --foo is not allowed"}
	if got := rec.Events(); len(got) != 1 || got[0] != want {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
}

// Without an OnTerminating hook every drain report records a Normal SidecarDraining Event
// naming the sidecar; a pod whose UID is not known never reaches the hook (it cannot tell
// that pod's first report) and gets the Event each time.
func TestOnStatusTerminatingWithoutTheHook(t *testing.T) {
	rec := &podevents.Recorder{}
	s := newTestMounter(t, Config{Events: rec})
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	for _, v := range []string{"data", "logs"} {
		s.onStatus(pod, handoff.Volume{VolumeName: v, Bucket: "bkt"}, &handoff.Status{State: handoff.StateTerminating}, s.cfg.Log)
	}
	got := rec.Events()
	if len(got) != 2 {
		t.Fatalf("events without a hook = %+v, want one per report", got)
	}
	for _, e := range got {
		if e.Pod != pod || e.Warning || e.Reason != contract.EventSidecarDraining || !strings.Contains(e.Msg, contract.SidecarContainerName+" keeps serving") {
			t.Errorf("drain event = %+v", e)
		}
	}

	hooked := 0
	rec = &podevents.Recorder{}
	s = newTestMounter(t, Config{Events: rec, OnTerminating: func(nodevolume.PodRef) bool { hooked++; return false }})
	noUID := nodevolume.PodRef{Namespace: "ns", Name: "p"}
	s.onStatus(noUID, handoff.Volume{VolumeName: "data", Bucket: "bkt"}, &handoff.Status{State: handoff.StateTerminating}, s.cfg.Log)
	if hooked != 0 || rec.Count(contract.EventSidecarDraining) != 1 {
		t.Fatalf("a pod without a UID: hook called %d times, %d drain Events; want 0 and 1", hooked, rec.Count(contract.EventSidecarDraining))
	}
	// The hook's "not the first" holds the Event back.
	s.onStatus(pod, handoff.Volume{VolumeName: "data", Bucket: "bkt"}, &handoff.Status{State: handoff.StateTerminating}, s.cfg.Log)
	if hooked != 1 || rec.Count(contract.EventSidecarDraining) != 1 {
		t.Fatalf("a later report: hook called %d times, %d drain Events; want 1 and 1", hooked, rec.Count(contract.EventSidecarDraining))
	}
}

// statusSpy is a StatusRecorder that keeps what it is given; safe for concurrent use.
type statusSpy struct {
	mu          sync.Mutex
	states      []string
	publishedAt []time.Time
}

func (s *statusSpy) Status(st *handoff.Status, publishedAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states = append(s.states, st.State)
	s.publishedAt = append(s.publishedAt, publishedAt)
}

// Every report of a volume's sidecar reaches the metrics with the volume's publish time,
// whatever its state; gcsfuse's start, and only it, applies the volume's read-ahead (here
// refused: the target is not mounted, so a ReadAheadFailed Warning on the volume's pod),
// and each report becomes its Event.
func TestStatusHandlerMetricsReadAheadAndEvents(t *testing.T) {
	rec := &podevents.Recorder{}
	spy := &statusSpy{}
	s := newTestMounter(t, Config{Events: rec, Metrics: spy})
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	kb := 8192
	r := &offerRecord{Target: t.TempDir(), PodUID: "uid-1", Pod: pod, ReadAheadKB: &kb,
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := s.statusHandler(r, at, s.cfg.Log)
	h(&handoff.Status{State: handoff.StateFailed, Message: "boom"})
	if n := rec.Count(contract.EventReadAheadFailed); n != 0 {
		t.Fatalf("read-ahead applied on a failed start: %d ReadAheadFailed Events", n)
	}
	h(&handoff.Status{State: handoff.StateStarted, ElapsedMillis: 5})
	h(&handoff.Status{State: handoff.StateExited, Message: "gcsfuse died"})
	if want := []string{handoff.StateFailed, handoff.StateStarted, handoff.StateExited}; strings.Join(spy.states, ",") != strings.Join(want, ",") {
		t.Errorf("metrics got %q, want %q", spy.states, want)
	}
	for _, p := range spy.publishedAt {
		if !p.Equal(at) {
			t.Errorf("metrics got publish time %v, want %v", p, at)
		}
	}
	var reasons []string
	for _, e := range rec.Events() {
		reasons = append(reasons, e.Reason)
		if e.Pod != pod {
			t.Errorf("event on %+v, want %+v", e.Pod, pod)
		}
		if e.Reason == contract.EventReadAheadFailed && (!e.Warning || !strings.HasPrefix(e.Msg, "volume data: read_ahead_kb=8192 ")) {
			t.Errorf("read-ahead event = %+v", e)
		}
	}
	want := []string{contract.EventGcsfuseFailed, contract.EventReadAheadFailed, contract.EventGcsfuseStarted, contract.EventGcsfuseExited}
	if strings.Join(reasons, ",") != strings.Join(want, ",") {
		t.Errorf("events %q, want %q", reasons, want)
	}
}
