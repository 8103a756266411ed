package runtimewatch_test

import (
	"context"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/metricstest"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/containerexittest"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/runtimewatch"
)

const (
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	// within bounds a change reaching OnChange: an event or a poll, plus -race slack.
	within  = 2 * time.Second
	timeout = 15 * time.Second
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// changes records OnChange calls.
type changes struct {
	mu   sync.Mutex
	pods []string
	at   []time.Time
}

func (c *changes) add(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods = append(c.pods, uid)
	c.at = append(c.at, time.Now())
}

// waitFor waits for a change of uid after index from and returns when it came.
func (c *changes) waitFor(t *testing.T, uid string, from int, d time.Duration) (time.Time, int) {
	t.Helper()
	for start := time.Now(); time.Since(start) < d; time.Sleep(2 * time.Millisecond) {
		c.mu.Lock()
		for i := from; i < len(c.pods); i++ {
			if c.pods[i] == uid {
				at := c.at[i]
				c.mu.Unlock()
				return at, i + 1
			}
		}
		c.mu.Unlock()
	}
	t.Fatalf("no change of pod %s within %s", uid, d)
	return time.Time{}, 0
}

func (c *changes) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pods)
}

type fixture struct {
	srv     *containerexittest.Server
	w       *runtimewatch.Watcher
	changes *changes
	reg     *prometheus.Registry
}

// start runs a watch against a fake runtime reporting name/version, with its event stream
// served when events is true.
func start(t *testing.T, name, version string, events bool, cfg runtimewatch.Config) *fixture {
	t.Helper()
	srv := containerexittest.NewServer(t)
	srv.SetVersion(name, version)
	if events {
		srv.EnableEvents()
	}
	cri, err := containerexit.Dial(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cri.Close() })
	f := &fixture{srv: srv, changes: &changes{}, reg: prometheus.NewRegistry()}
	m, err := runtimewatch.NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.OnChange, cfg.Log, cfg.Metrics = cri, f.changes.add, quiet, m
	if f.w, err = runtimewatch.New(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(timeout):
			t.Error("Run did not end after its context")
		}
	})
	for start := time.Now(); !f.w.Synced(); time.Sleep(2 * time.Millisecond) {
		if time.Since(start) > timeout {
			t.Fatal("never synced")
		}
	}
	return f
}

func (f *fixture) source(t *testing.T, src string) float64 {
	t.Helper()
	return metricValue(t, f.reg, metricscatalog.RuntimeSource.Name, src)
}

func ctr(pod, name string, attempt uint32, state runtimeapi.ContainerState) containerexittest.Container {
	return containerexittest.Container{ID: pod + "-" + name, PodUID: pod, Name: name, Attempt: attempt, State: state}
}

// The source follows the runtime: containerd 2.x gives every reader each event; 1.6 has no
// stream; 1.7 and CRI-O hand each event to one reader, which would take it from the kubelet.
func TestSourceFollowsTheRuntime(t *testing.T) {
	for _, tt := range []struct {
		name, runtime, version string
		events                 bool
		mode                   runtimewatch.Mode
		want                   string
	}{
		{"containerd 2", "containerd", "v2.2.9", true, runtimewatch.ModeAuto, runtimewatch.SourceEvents},
		{"containerd 1.6 (no stream)", "containerd", "1.6.20~ds1", false, runtimewatch.ModeAuto, runtimewatch.SourcePoll},
		{"containerd 1.7 (single reader)", "containerd", "v1.7.24", true, runtimewatch.ModeAuto, runtimewatch.SourcePoll},
		{"cri-o", "cri-o", "1.31.0", true, runtimewatch.ModeAuto, runtimewatch.SourcePoll},
		{"forced poll on containerd 2", "containerd", "v2.2.9", true, runtimewatch.ModePoll, runtimewatch.SourcePoll},
		{"forced events on 1.7", "containerd", "v1.7.24", true, runtimewatch.ModeEvents, runtimewatch.SourceEvents},
		{"containerd 2 without the stream falls back", "containerd", "v2.0.0", false, runtimewatch.ModeAuto, runtimewatch.SourcePoll},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t, tt.runtime, tt.version, tt.events, runtimewatch.Config{Mode: tt.mode, ResyncInterval: time.Hour})
			// A fallback happens after the first receive: wait for the source to settle.
			var got string
			for start := time.Now(); time.Since(start) < within; time.Sleep(10 * time.Millisecond) {
				if got = f.w.Source(); got == tt.want && f.source(t, tt.want) == 1 {
					break
				}
			}
			if got != tt.want {
				t.Fatalf("source = %q, want %q", got, tt.want)
			}
			other := runtimewatch.SourcePoll
			if tt.want == other {
				other = runtimewatch.SourceEvents
			}
			if f.source(t, tt.want) != 1 || f.source(t, other) != 0 {
				t.Fatalf("source metric: %s=%v %s=%v", tt.want, f.source(t, tt.want), other, f.source(t, other))
			}
			// Whatever the source, an exit reaches OnChange and the state.
			f.srv.Set(ctr("p1", "app", 0, running))
			_, next := f.changes.waitFor(t, "p1", 0, within)
			f.srv.SetState("p1-app", exited, 7)
			f.changes.waitFor(t, "p1", next, within)
			st, err := f.w.Status(context.Background(), "p1-app")
			if err != nil || !st.ExitKnown || st.ExitCode != 7 {
				t.Fatalf("Status = %+v, %v; want exit 7", st, err)
			}
		})
	}
}

// With the event stream, an exit is known at once, without polling: the relist runs once an
// hour here, and the runtime is listed only at the start and once after subscribing.
func TestEventsNeedNoPolling(t *testing.T) {
	f := start(t, "containerd", "v2.2.9", true, runtimewatch.Config{ResyncInterval: time.Hour})
	f.srv.Set(ctr("p1", "app", 0, running), ctr("p1", "gcsfuse-sidecar", 0, running), ctr("p2", "app", 0, running))
	f.changes.waitFor(t, "p2", 0, within)
	time.Sleep(1500 * time.Millisecond) // past the relist that closes the subscription gap
	lists := f.srv.Calls("ListContainers")
	next := f.changes.len()
	f.srv.SetState("p1-app", exited, 0)
	before := time.Now()
	at, _ := f.changes.waitFor(t, "p1", next, within)
	t.Logf("exit known after %s", at.Sub(before))
	cs, err := f.w.PodContainers(context.Background(), "p1")
	if err != nil || len(cs) != 2 {
		t.Fatalf("PodContainers(p1) = %v, %v", cs, err)
	}
	for _, c := range cs {
		if c.Name == "app" && (c.State != containerexit.StateExited || !c.ExitKnown) {
			t.Fatalf("app = %+v, want exited with its code (from the event)", c)
		}
	}
	if got := f.srv.Calls("ListContainers"); got != lists {
		t.Fatalf("%d ListContainers calls during the exit, want none (served from the state)", got-lists)
	}
	if n := f.srv.Calls("ContainerStatus"); n != 0 {
		t.Fatalf("%d ContainerStatus calls, want none: the event carries the exit code", n)
	}
}

// When the stream breaks (the runtime restarts), the watch polls until it can subscribe
// again, so no exit waits for the stream; it then goes back to events.
func TestBrokenStreamPollsThenResubscribes(t *testing.T) {
	f := start(t, "containerd", "v2.2.9", true, runtimewatch.Config{ResyncInterval: time.Hour, PollInterval: 20 * time.Millisecond})
	for start := time.Now(); f.srv.Subscribers() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > timeout {
			t.Fatal("never subscribed")
		}
	}
	f.srv.CloseStreams()
	for start := time.Now(); f.w.Source() != runtimewatch.SourcePoll; time.Sleep(2 * time.Millisecond) {
		if time.Since(start) > within {
			t.Fatal("still on events after the stream broke")
		}
	}
	if v := errorCount(t, f.reg, "events"); v != 1 {
		t.Fatalf("events errors = %v, want 1", v)
	}
	// Polling now: a change comes through although no stream is open. (The fake queues
	// nothing for a closed stream, so this can only be the poll.)
	f.srv.Set(ctr("p9", "app", 0, exited))
	f.changes.waitFor(t, "p9", 0, within)
	// And the stream comes back after the retry delay.
	for start := time.Now(); f.w.Source() != runtimewatch.SourceEvents || f.srv.Subscribers() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > timeout {
			t.Fatalf("not resubscribed: source %q, %d streams", f.w.Source(), f.srv.Subscribers())
		}
	}
}

// A listing that is older than what an event said does not undo it: states only move
// forward, and exit codes once known stay.
func TestStatesOnlyMoveForward(t *testing.T) {
	f := start(t, "containerd", "v2.2.9", true, runtimewatch.Config{ResyncInterval: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	f.srv.Set(ctr("p1", "app", 0, running))
	f.changes.waitFor(t, "p1", 0, within)
	f.srv.SetState("p1-app", exited, 4)
	// A runtime that lists the container as running again (a stale answer) is ignored.
	f.srv.SetStateQuiet("p1-app", running)
	time.Sleep(200 * time.Millisecond) // several relists
	st, err := f.w.Status(context.Background(), "p1-app")
	if err != nil || st.State != containerexit.StateExited || st.ExitCode != 4 {
		t.Fatalf("after a stale listing: %+v, %v; want exited 4", st, err)
	}
}

// A removed container leaves the state, and the pod is reported changed.
func TestRemovalIsAChange(t *testing.T) {
	f := start(t, "containerd", "1.6.20", false, runtimewatch.Config{PollInterval: 20 * time.Millisecond})
	f.srv.Set(ctr("p1", "app", 0, exited))
	_, next := f.changes.waitFor(t, "p1", 0, within)
	f.srv.Remove("p1-app")
	f.changes.waitFor(t, "p1", next, within)
	if cs, _ := f.w.PodContainers(context.Background(), "p1"); len(cs) != 0 {
		t.Fatalf("removed container still there: %v", cs)
	}
	// Nothing changes: nothing is reported.
	n := f.changes.len()
	time.Sleep(200 * time.Millisecond)
	if f.changes.len() != n {
		t.Fatalf("%d changes reported while nothing changed", f.changes.len()-n)
	}
}

func TestNewValidates(t *testing.T) {
	cri, err := containerexit.Dial("unix:///nonexistent.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer cri.Close()
	for _, tt := range []struct {
		cfg  runtimewatch.Config
		want string
	}{
		{runtimewatch.Config{}, "no runtime client"},
		{runtimewatch.Config{Client: cri, Mode: "sometimes"}, "sometimes"},
		{runtimewatch.Config{Client: cri, PollInterval: -time.Second}, "negative"},
		{runtimewatch.Config{Client: cri, PollInterval: time.Minute, ResyncInterval: time.Second}, "shorter"},
	} {
		if _, err := runtimewatch.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) error = %v, want one containing %q", tt.cfg, err, tt.want)
		}
	}
	if _, err := runtimewatch.ParseMode("poll"); err != nil {
		t.Error(err)
	}
}

// A runtime that is down is retried, and Run still ends with its context.
func TestRuntimeDownIsRetried(t *testing.T) {
	f := start(t, "containerd", "1.6.20", false, runtimewatch.Config{PollInterval: 20 * time.Millisecond})
	f.srv.FailList(errDown)
	// Retried: a second failed listing comes (bounded wait, not a fixed sleep: under load a
	// fixed 100 ms saw only the first).
	deadline := time.Now().Add(within)
	for errorCount(t, f.reg, "list") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("list errors = %v after %s, want retries", errorCount(t, f.reg, "list"), within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.srv.FailList(nil)
	f.srv.Set(ctr("p1", "app", 0, running))
	f.changes.waitFor(t, "p1", 0, within)
}

var errDown = io.ErrUnexpectedEOF

// errorCount reads the errors counter for op (0 when not yet counted).
func errorCount(t *testing.T, reg *prometheus.Registry, op string) float64 {
	t.Helper()
	return metricValue(t, reg, metricscatalog.RuntimeErrors.Name, op)
}

// metricValue reads the gauge or counter name whose one label has value (0 when absent).
func metricValue(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	g, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range g {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == value {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A node-wide listing that fails after the state was synced makes it stale: the watch says
// it is not synced and answers per pod from the runtime, never the stale "running" of a
// container that exited meanwhile; a listing that works again makes it synced.
func TestFailedListingIsNotServedAsSynced(t *testing.T) {
	f := start(t, "containerd", "1.6.20", false, runtimewatch.Config{PollInterval: 20 * time.Millisecond})
	f.srv.Set(ctr("p1", "app", 0, running))
	f.changes.waitFor(t, "p1", 0, within)
	f.srv.FailList(errDown)
	f.srv.SetStateQuiet("p1-app", runtimeapi.ContainerState_CONTAINER_EXITED)
	for start := time.Now(); f.w.Synced(); time.Sleep(2 * time.Millisecond) {
		if time.Since(start) > timeout {
			t.Fatal("still synced while every listing fails")
		}
	}
	if cs, err := f.w.PodContainers(context.Background(), "p1"); err == nil {
		t.Fatalf("PodContainers while the runtime cannot list = %+v, nil; want the runtime's error, not the stale state", cs)
	}
	f.srv.FailList(nil)
	for start := time.Now(); !f.w.Synced(); time.Sleep(2 * time.Millisecond) {
		if time.Since(start) > timeout {
			t.Fatal("not synced again once listings work")
		}
	}
	cs, err := f.w.PodContainers(context.Background(), "p1")
	if err != nil || len(cs) != 1 || cs[0].State != containerexit.StateExited {
		t.Fatalf("PodContainers = %+v, %v; want p1's app exited", cs, err)
	}
}

// TestErrorSeriesExistFromTheStart: both ops of the errors counter are exported at 0 before
// any error, so the dashboard's watch-health panel shows 0 instead of no data.
func TestErrorSeriesExistFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := runtimewatch.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if n := metricstest.SeriesOf(reg, metricscatalog.RuntimeErrors.Name); n != 2 {
		t.Fatalf("%s has %d series before any error, want 2 (list, events)", metricscatalog.RuntimeErrors.Name, n)
	}
}

// TestStopEventWithoutStatusRefreshesThePod guards the rule that a stop event which does not
// carry its own container's status (containerd sends one when it cannot read the statuses)
// makes the watch list that pod's containers at once, and report the exit, rather than leave
// it to the next relist (DefaultResyncInterval, 10 s; an hour here, so only the refresh can
// tell). The refresh asks for that pod alone, not the node.
func TestStopEventWithoutStatusRefreshesThePod(t *testing.T) {
	f := start(t, "containerd", "v2.2.9", true, runtimewatch.Config{ResyncInterval: time.Hour})
	// Past the relist that closes the subscription gap: from here on, only events and what
	// they make the watch ask reach it.
	for start := time.Now(); f.srv.Calls("ListContainers") < 2 || f.srv.Subscribers() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > timeout {
			t.Fatalf("no stream and relist after subscribing: %d listings, %d streams", f.srv.Calls("ListContainers"), f.srv.Subscribers())
		}
	}
	f.srv.Set(ctr("p1", "app", 0, running), ctr("p1", "gcsfuse-sidecar", 0, running))
	// The waits below are bounded by timeout, far below the hour to the next relist: only
	// the event, or what it makes the watch ask, can end them in time.
	_, next := f.changes.waitFor(t, "p1", 0, timeout)
	lists := f.srv.Calls("ListContainers")
	if n := f.srv.PodListings("p1"); n != 0 {
		t.Fatalf("%d listings of p1 before any event without a status", n)
	}

	f.srv.SetStateWithoutStatuses("p1-app", exited, 3)
	for start := time.Now(); ; time.Sleep(2 * time.Millisecond) {
		if cs, _ := f.w.PodContainers(context.Background(), "p1"); exitedApp(cs) {
			break
		}
		if time.Since(start) > timeout {
			t.Fatalf("the stop event without its container's status did not refresh the pod within %s "+
				"(%d listings of p1): its exit waits for the next relist", timeout, f.srv.PodListings("p1"))
		}
	}
	f.changes.waitFor(t, "p1", next, timeout)
	if n, all := f.srv.PodListings("p1"), f.srv.Calls("ListContainers")-lists; n != 1 || all != 1 {
		t.Fatalf("%d listings of p1 and %d in all after the event, want one of the pod alone", n, all)
	}
	if st, err := f.w.Status(context.Background(), "p1-app"); err != nil || !st.ExitKnown || st.ExitCode != 3 {
		t.Fatalf("Status(p1-app) = %+v, %v; want exit code 3", st, err)
	}
}

func exitedApp(cs []containerexit.Container) bool {
	for _, c := range cs {
		if c.Name == "app" && c.State == containerexit.StateExited {
			return true
		}
	}
	return false
}
