// Package runtimewatch keeps the state of every container on the node as the container
// runtime reports it, and says which pods changed. The node plugin needs it to tell a sidecar
// that its workload is done the moment the workload's containers exit, before the kubelet has
// noticed: the kubelet learns of exits by relisting the runtime once a second and the API
// server hears of them later still, while a sidecar that the kubelet has to stop itself costs
// a Job about two seconds (docs/lifecycle.md).
//
// Two sources feed it. The CRI container event stream (GetContainerEvents) is used where the
// runtime serves every subscriber its own copy of each event: containerd 2.x. containerd 1.7
// and CRI-O hand each event to a single reader, so reading it there would take events from a
// kubelet running the evented PLEG; on those, and on runtimes without the stream, one
// ListContainers call for the whole node every PollInterval is used instead. The event
// stream is backed by a slower relist, so an event lost while the stream reconnects is only
// late, never missed.
//
// Missing a container can only delay a decision, never make one early: a container the watch
// has not seen is judged by its API status, which shows it waiting or running.
package runtimewatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/backoff"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
)

// Sources, as logged and as the value of the source metric's label.
const (
	SourceEvents = "events"
	SourcePoll   = "poll"
)

// Mode chooses the source.
type Mode string

// Modes.
const (
	// ModeAuto uses the event stream on runtimes known to broadcast it (containerd >= 2),
	// polling elsewhere.
	ModeAuto Mode = "auto"
	// ModeEvents uses the event stream wherever the runtime serves it.
	ModeEvents Mode = "events"
	// ModePoll always polls.
	ModePoll Mode = "poll"
)

// ParseMode validates a --runtime-events value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeEvents, ModePoll:
		return m, nil
	}
	return "", fmt.Errorf("runtime events mode %q: want %q, %q or %q", s, ModeAuto, ModeEvents, ModePoll)
}

// Defaults.
const (
	// DefaultPollInterval is the period of the node-wide ListContainers when polling: it is
	// the most a sidecar waits after its workload's exit, and one local call per period is
	// cheap (the runtime answers from memory).
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultResyncInterval is the period of the relist that backs the event stream.
	DefaultResyncInterval = 10 * time.Second
	// subscribeGap is when, after subscribing, the containers are listed once more: the
	// runtime registers the subscription some time after the request, and an event from
	// that gap would otherwise wait for the next resync.
	subscribeGap = time.Second
	// eventBuffer holds events between the stream's reader and the watch loop.
	eventBuffer = 256
	// Reconnecting a failed event stream backs off from streamRetryFirst to streamRetryMax,
	// polling meanwhile.
	streamRetryFirst = time.Second
	streamRetryMax   = 30 * time.Second
)

// Client is what the watch needs from the runtime; *containerexit.CRI implements it.
type Client interface {
	Version(ctx context.Context) (containerexit.RuntimeVersion, error)
	ListAll(ctx context.Context) ([]containerexit.Container, error)
	PodContainers(ctx context.Context, podUID string) ([]containerexit.Container, error)
	Status(ctx context.Context, containerID string) (containerexit.Container, error)
	Events(ctx context.Context, fn func(containerexit.Event)) error
}

var _ Client = (*containerexit.CRI)(nil)

// Config configures a Watcher.
type Config struct {
	Client Client
	Mode   Mode // "" means ModeAuto
	// PollInterval and ResyncInterval: zero means the defaults.
	PollInterval   time.Duration
	ResyncInterval time.Duration
	// OnChange is called, on the watch's goroutine and one pod at a time, with the UID of
	// each pod whose containers were created, changed state or were removed. It must not
	// block for long: the next change waits.
	OnChange func(podUID string)
	Log      *slog.Logger
	// Metrics, if not nil, records the source and the watch's work.
	Metrics *Metrics
}

// Watcher is the node-wide container state. It implements containerexit.Runtime from that
// state, so that per-pod followers make no runtime calls of their own.
type Watcher struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex
	containers map[string]containerexit.Container // by container ID
	// byPod indexes containers by pod UID, so that a follower's PodContainers (every
	// PollInterval per followed pod) reads its pod's few containers, not the node's
	// thousands.
	byPod  map[string]map[string]struct{}
	synced bool

	source  atomic.Value // string
	running atomic.Bool
}

var _ containerexit.Runtime = (*Watcher)(nil)

// New validates cfg and returns a Watcher; Run starts it.
func New(cfg Config) (*Watcher, error) {
	if cfg.Client == nil {
		return nil, errors.New("runtimewatch: no runtime client")
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeAuto
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, fmt.Errorf("runtimewatch: %w", err)
	}
	if cfg.PollInterval < 0 || cfg.ResyncInterval < 0 {
		return nil, fmt.Errorf("runtimewatch: negative interval (poll %s, resync %s)", cfg.PollInterval, cfg.ResyncInterval)
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.ResyncInterval = cmp.Or(cfg.ResyncInterval, DefaultResyncInterval)
	if cfg.ResyncInterval < cfg.PollInterval {
		return nil, fmt.Errorf("runtimewatch: resync interval %s is shorter than the poll interval %s", cfg.ResyncInterval, cfg.PollInterval)
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func(string) {}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	w := &Watcher{cfg: cfg, log: cfg.Log.With("component", "runtimewatch"), containers: map[string]containerexit.Container{}, byPod: map[string]map[string]struct{}{}}
	w.source.Store("")
	return w, nil
}

// Source is the source in use: SourceEvents, SourcePoll, or "" before Run has chosen.
func (w *Watcher) Source() string { return w.source.Load().(string) }

// Synced reports whether the state is current: listed from the runtime, and the last
// listing did not fail.
func (w *Watcher) Synced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// Run watches until ctx ends; it returns nil then. Runtime errors are logged and retried:
// the runtime may restart under a running node plugin. Run may be called once.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("runtimewatch: Run called twice")
	}
	useEvents := w.chooseEvents(ctx)
	var events chan containerexit.Event
	var streamErr chan error
	var readerDone chan struct{}
	subscribe := func() {
		events, streamErr, readerDone = make(chan containerexit.Event, eventBuffer), make(chan error, 1), make(chan struct{})
		ev, errc, done := events, streamErr, readerDone
		go func() { // owned by Run: ends when ctx ends or the stream fails; Run waits for it
			defer close(done)
			errc <- w.cfg.Client.Events(ctx, func(e containerexit.Event) {
				select {
				case ev <- e:
				case <-ctx.Done():
				}
			})
		}()
	}
	defer func() {
		if readerDone != nil {
			<-readerDone
		}
	}()

	retry := backoff.Doubling(streamRetryFirst, streamRetryMax)
	var retryAt time.Time
	var gap <-chan time.Time // fires subscribeGap after a subscription
	if useEvents {
		subscribe()
		gap = time.After(subscribeGap)
		w.setSource(SourceEvents)
	} else {
		w.setSource(SourcePoll)
	}
	w.relist(ctx)
	tick := time.NewTicker(w.interval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-events:
			w.apply(ctx, e)
		case <-gap:
			gap = nil
			retry = backoff.Doubling(streamRetryFirst, streamRetryMax) // the stream held: the next failure starts the backoff anew
			w.relist(ctx)
		case err := <-streamErr:
			<-readerDone
			events, streamErr, readerDone, gap = nil, nil, nil, nil
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, containerexit.ErrNoEvents) {
				w.log.Warn("the runtime has no container event stream; polling it instead", "every", w.cfg.PollInterval.String(), "err", err)
				useEvents = false
			} else {
				in := retry.Step()
				w.log.Warn("container event stream ended; polling until it is back", "retryIn", in.String(), "err", err)
				retryAt = time.Now().Add(in)
			}
			w.cfg.Metrics.streamError()
			w.setSource(SourcePoll)
			tick.Reset(w.interval())
			w.relist(ctx)
		case now := <-tick.C:
			if useEvents && events == nil && !now.Before(retryAt) {
				subscribe()
				gap = time.After(subscribeGap)
				w.setSource(SourceEvents)
				w.log.Info("container event stream subscribed again")
				tick.Reset(w.interval())
			}
			w.relist(ctx)
		}
	}
}

// interval is the relist period for the current source.
func (w *Watcher) interval() time.Duration {
	if w.Source() == SourceEvents {
		return w.cfg.ResyncInterval
	}
	return w.cfg.PollInterval
}

// chooseEvents decides whether to use the event stream, and logs why.
func (w *Watcher) chooseEvents(ctx context.Context) bool {
	switch w.cfg.Mode {
	case ModePoll:
		w.log.Info("polling the container runtime (--runtime-events=poll)", "every", w.cfg.PollInterval.String())
		return false
	case ModeEvents:
		w.log.Info("using the container runtime's event stream (--runtime-events=events)")
		return true
	}
	v, err := w.cfg.Client.Version(ctx)
	if err != nil {
		w.log.Warn("cannot ask the runtime its version; polling it", "every", w.cfg.PollInterval.String(), "err", err)
		return false
	}
	if BroadcastsEvents(v) {
		w.log.Info("using the container runtime's event stream", "runtime", v.String())
		return true
	}
	w.log.Info("polling the container runtime: its event stream, if any, has a single reader shared with the kubelet",
		"runtime", v.String(), "every", w.cfg.PollInterval.String())
	return false
}

// BroadcastsEvents reports whether a runtime gives every GetContainerEvents subscriber each
// event: containerd from 2.0 on. containerd 1.7 (and CRI-O) deliver each event to one reader.
func BroadcastsEvents(v containerexit.RuntimeVersion) bool {
	return strings.EqualFold(v.Name, "containerd") && v.Major() >= 2
}

func (w *Watcher) setSource(s string) {
	w.source.Store(s)
	w.cfg.Metrics.setSource(s)
}

// relist replaces the state with one node-wide listing and reports the pods that changed.
func (w *Watcher) relist(ctx context.Context) {
	cs, err := w.cfg.Client.ListAll(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.cfg.Metrics.listError()
			// The state may have missed exits since: no longer serve it as current, or a
			// follower would see "running" forever. PodContainers asks the runtime per pod
			// until a listing works again.
			w.mu.Lock()
			wasSynced := w.synced
			w.synced = false
			w.mu.Unlock()
			if wasSynced {
				w.log.Warn("cannot list the node's containers; the state is stale, per-pod runtime calls until a listing works", "err", err)
			} else {
				w.log.Warn("cannot list the node's containers; retrying", "err", err)
			}
		}
		return
	}
	w.cfg.Metrics.relisted()
	listed := make(map[string]bool, len(cs))
	changed := map[string]bool{}
	w.mu.Lock()
	for _, c := range cs {
		listed[c.ID] = true
		if w.mergeLocked(c) {
			changed[c.PodUID] = true
		}
	}
	for id, c := range w.containers {
		if !listed[id] {
			w.deleteLocked(id)
			changed[c.PodUID] = true
		}
	}
	first := !w.synced
	w.synced = true
	w.mu.Unlock()
	if first {
		w.log.Info("container runtime listed; synced", "containers", len(cs), "source", w.Source())
	}
	w.notify(changed)
}

// apply folds one event into the state.
func (w *Watcher) apply(ctx context.Context, e containerexit.Event) {
	w.cfg.Metrics.event(e.Kind.String())
	changed := map[string]bool{}
	w.mu.Lock()
	if e.Kind == containerexit.EventDeleted {
		if c, ok := w.containers[e.ContainerID]; ok {
			w.deleteLocked(e.ContainerID)
			changed[c.PodUID] = true
		}
	}
	seen := false
	for _, c := range e.Containers {
		if e.Kind == containerexit.EventDeleted && c.ID == e.ContainerID {
			continue
		}
		seen = seen || c.ID == e.ContainerID
		if w.mergeLocked(c) {
			changed[c.PodUID] = true
		}
	}
	w.mu.Unlock()
	if !seen && e.Kind != containerexit.EventDeleted {
		// The event did not carry its own container's status: ask for the pod's.
		w.refreshPod(ctx, e.PodUID)
	}
	w.notify(changed)
}

// refreshPod lists one pod's containers (all of them when the pod is not known).
func (w *Watcher) refreshPod(ctx context.Context, podUID string) {
	if podUID == "" {
		w.relist(ctx)
		return
	}
	cs, err := w.cfg.Client.PodContainers(ctx, podUID)
	if err != nil {
		w.log.Warn("cannot list a pod's containers after an event; the next relist will", "podUID", podUID, "err", err)
		return
	}
	changed := false
	w.mu.Lock()
	for _, c := range cs {
		c.PodUID = podUID
		changed = w.mergeLocked(c) || changed
	}
	w.mu.Unlock()
	if changed {
		w.notify(map[string]bool{podUID: true})
	}
}

// mergeLocked stores c and reports whether anything a decision reads changed. States only
// move forward (created, running or unknown, exited): a listing or an event that is older
// than what is stored does not undo it. An exit code once known is kept.
func (w *Watcher) mergeLocked(c containerexit.Container) bool {
	if c.ID == "" || c.PodUID == "" {
		return false
	}
	old, ok := w.containers[c.ID]
	if !ok {
		w.putLocked(c)
		return true
	}
	if rank(c.State) < rank(old.State) {
		c.State = old.State
	}
	if !c.ExitKnown && old.ExitKnown && c.State == containerexit.StateExited {
		c.ExitCode, c.ExitKnown, c.FinishedAt = old.ExitCode, true, old.FinishedAt
	}
	w.putLocked(c)
	return c.State != old.State || c.ExitKnown != old.ExitKnown
}

// putLocked stores c under its ID and its pod's index.
func (w *Watcher) putLocked(c containerexit.Container) {
	if old, ok := w.containers[c.ID]; ok && old.PodUID != c.PodUID {
		w.deleteLocked(c.ID)
	}
	w.containers[c.ID] = c
	ids := w.byPod[c.PodUID]
	if ids == nil {
		ids = map[string]struct{}{}
		w.byPod[c.PodUID] = ids
	}
	ids[c.ID] = struct{}{}
}

// deleteLocked forgets the container id, and its pod's index once empty.
func (w *Watcher) deleteLocked(id string) {
	c, ok := w.containers[id]
	if !ok {
		return
	}
	delete(w.containers, id)
	if ids := w.byPod[c.PodUID]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(w.byPod, c.PodUID)
		}
	}
}

func rank(s containerexit.State) int {
	switch s {
	case containerexit.StateCreated:
		return 0
	case containerexit.StateExited:
		return 2
	}
	return 1
}

func (w *Watcher) notify(pods map[string]bool) {
	for uid := range pods {
		w.cfg.OnChange(uid)
	}
}

// PodContainers returns the pod's containers from the state; while it is not synced (before
// the first listing, or after a failed one) it asks the runtime.
func (w *Watcher) PodContainers(ctx context.Context, podUID string) ([]containerexit.Container, error) {
	w.mu.Lock()
	if !w.synced {
		w.mu.Unlock()
		return w.cfg.Client.PodContainers(ctx, podUID)
	}
	var out []containerexit.Container
	for id := range w.byPod[podUID] {
		out = append(out, w.containers[id])
	}
	w.mu.Unlock()
	return out, nil
}

// Status returns a container from the state when its exit code is known there (an event
// brought it, or an earlier call), else from one ContainerStatus call whose answer is kept.
func (w *Watcher) Status(ctx context.Context, containerID string) (containerexit.Container, error) {
	w.mu.Lock()
	c, ok := w.containers[containerID]
	w.mu.Unlock()
	if ok && c.ExitKnown {
		return c, nil
	}
	st, err := w.cfg.Client.Status(ctx, containerID)
	if err != nil {
		return containerexit.Container{}, err
	}
	if st.State == containerexit.StateExited {
		w.mu.Lock()
		if c, ok := w.containers[containerID]; ok {
			c.State, c.ExitCode, c.ExitKnown, c.FinishedAt = containerexit.StateExited, st.ExitCode, st.ExitKnown, st.FinishedAt
			w.containers[containerID] = c
		}
		w.mu.Unlock()
	}
	return st, nil
}
