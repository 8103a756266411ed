// Package podwatch watches the pods of one node for the node plugin and reports, at each
// update of a pod using the gcsfuse sidecar, whether its workload is done (so the sidecar can
// be told to exit) and whether its sidecar failed (so the user gets an Event explaining why
// the mount broke). It keeps no memory of its own of what it reported: the node plugin's
// per-pod record does, so that a request given up can be retried by a later update. It is
// event driven: decisions are taken on the informer's add and update
// notifications, never by polling, so the sidecar is ended as soon as the API server reports
// the last workload container's exit.
package podwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/driverpod"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// Handler receives the watcher's findings. Its methods are called from one goroutine owned by
// Watcher.Run, one call at a time, never from the informer, so a slow call delays later
// callbacks but never the watch itself. A method is called at every evaluation of the pod
// (each update the informer delivers) for which its condition holds: the watcher remembers
// nothing, so the handler tells a repeat from news (exitcoord.ExitCoordinator keeps one
// record per pod for that), and must be idempotent, as writing an exit file is: a restarted
// node plugin reports again the pods that are already done.
//
// The pod passed in is a private, trimmed copy (see Watcher): it carries the name, namespace,
// UID, annotations with the contract.AnnotationPrefix prefix, the container names, the
// volumes and the container statuses, but no images, env, labels or managedFields. The
// handler may keep or modify it.
type Handler interface {
	// WorkloadDone is called while lifecycle.Decide reports the pod's workload as done: the
	// sidecar must be told to exit now.
	WorkloadDone(pod *corev1.Pod, decision lifecycle.Decision)
	// SidecarFailed is called while the pod's last sidecar run (run, from
	// lifecycle.SidecarFailedRun) shows that it exited with a non-zero code; message is its
	// termination message. A restarted sidecar that fails again (one that found the volumes
	// its predecessor lost) has another run.
	SidecarFailed(pod *corev1.Pod, run string, exitCode int32, message string)
}

// TerminationHandler is an optional extension of Handler. WorkloadTerminating is called
// while lifecycle.NeedsRuntimeFollow reports that a pod is being deleted
// while containers that can use its mounts may still run: a legacy pod whose workload has
// not terminated, or a native pod deleted during its init phase. The kubelet publishes no
// container status while it stops a pod's containers, so the handler must learn of their
// exit elsewhere (the runtime).
type TerminationHandler interface {
	WorkloadTerminating(pod *corev1.Pod, decision lifecycle.Decision)
}

// DeletionHandler is an optional extension of Handler. PodDeleting is called while the pod
// has a deletionTimestamp, whatever its sidecar mode and state, so the sidecar can learn the
// grace period the kubelet applies before it needs it (a second deletion can shorten it).
type DeletionHandler interface {
	PodDeleting(pod *corev1.Pod)
}

// InitHandler is an optional extension of Handler. InitContainersSucceeded is called while
// lifecycle.InitContainersSucceeded holds: every regular init container of a native-sidecar
// pod terminated with exit code 0.
type InitHandler interface {
	InitContainersSucceeded(pod *corev1.Pod)
}

// LatencyHandler is an optional extension of Handler. SidecarExited is called while the
// pod's status shows how long its sidecar (in mode) took to exit after the workload.
type LatencyHandler interface {
	SidecarExited(pod *corev1.Pod, mode string, latency time.Duration)
}

// Default timeouts; see WithSyncTimeout and WithShutdownTimeout.
const (
	DefaultSyncTimeout     = 30 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
)

// Option configures a Watcher.
type Option func(*Watcher)

// WithLogger sets the logger; the default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(w *Watcher) {
		if l != nil {
			w.log = l
		}
	}
}

// WithDriverName sets the CSI driver name the node plugin is installed under (one of
// contract.DriverNames): pods with an inline volume of that driver are the driver's. The
// default is contract.DriverName.
func WithDriverName(name string) Option {
	return func(w *Watcher) {
		if name != "" {
			w.driverName = name
		}
	}
}

// WithMetrics makes the watcher count its callbacks in m. Without it nothing is counted.
func WithMetrics(m *Metrics) Option {
	return func(w *Watcher) { w.metrics = m }
}

// WithSyncTimeout sets how long Run waits for the initial list of pods before it warns that
// it cannot reach the API server. It keeps waiting after the warning: the node plugin must
// go on serving CSI calls (mounts of new pods) whatever the API does, and client-go retries
// the list with backoff; pods that finished meanwhile are evaluated once the list succeeds.
func WithSyncTimeout(d time.Duration) Option {
	return func(w *Watcher) {
		if d > 0 {
			w.syncTimeout = d
		}
	}
}

// WithShutdownTimeout bounds how long Run, once its context is done, waits for a handler call
// in progress and for the informer to stop.
func WithShutdownTimeout(d time.Duration) Option {
	return func(w *Watcher) {
		if d > 0 {
			w.shutdownTimeout = d
		}
	}
}

// Watcher watches the pods bound to one node. Build it with New and start it with Run.
//
// It owns a private informer: the API server filters pods with the field selector
// spec.nodeName=<node>, so a node plugin holds only its own node's pods, and a transform trims
// every pod before it is cached, down to what lifecycle.Decide and the handler need (pods that
// do not use this driver are cut down to their metadata). Because the cached objects are
// trimmed, the informer must never be shared with code that needs whole pods.
type Watcher struct {
	client          kubernetes.Interface
	nodeName        string
	driverName      string
	handler         Handler
	log             *slog.Logger
	metrics         *Metrics
	syncTimeout     time.Duration
	shutdownTimeout time.Duration
	started         atomic.Bool

	// indexer is the synced pod cache, set while Run watches, for PodByUID.
	indexer atomic.Pointer[cache.Indexer]
}

// uidIndex indexes the pod cache by UID: the sidecar's hand-off names pods by UID only.
const uidIndex = "uid"

// New returns a Watcher for the pods of nodeName that reports to handler.
func New(client kubernetes.Interface, nodeName string, handler Handler, opts ...Option) *Watcher {
	w := &Watcher{
		client:          client,
		nodeName:        nodeName,
		driverName:      contract.DriverName,
		handler:         handler,
		log:             slog.Default(),
		syncTimeout:     DefaultSyncTimeout,
		shutdownTimeout: DefaultShutdownTimeout,
	}
	for _, o := range opts {
		o(w)
	}
	w.log = w.log.With("component", "podwatch", "node", nodeName)
	return w
}

// Run watches pods until ctx is done. It does not give up when the API server cannot be
// reached: the informer retries with backoff, Run logs a warning once the sync timeout has
// passed without a first list and logs again when the cache syncs, and the watch's health is
// exported (metricscatalog.WatchSynced, metricscatalog.WatchErrors). When the API server comes back the
// informer lists again, so pods that became done meanwhile are evaluated then.
//
// Run returns nil after a clean stop, and an error if the handler or the informer have not
// stopped within the shutdown timeout after ctx ended (or on misuse: an empty node name, a
// second call). Evaluations already queued when ctx ends are still carried out, within that
// timeout, so a pod found done just before shutdown is not silently dropped.
// Run may be called only once per Watcher.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("podwatch: Run called twice")
	}
	if w.nodeName == "" {
		return errors.New("podwatch: empty node name")
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	selector := fields.OneTermEqualSelector("spec.nodeName", w.nodeName).String()
	health := &watchHealth{metrics: w.metrics, log: w.log}
	health.metrics.setWatchSynced(false)
	informer := cache.NewSharedIndexInformer(w.listWatch(selector, health), &corev1.Pod{}, 0, // no resync: event driven
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, uidIndex: podUIDIndex})
	if err := informer.SetTransform(trimPod(w.driverName)); err != nil {
		return fmt.Errorf("podwatch: set transform: %w", err)
	}
	if err := informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		if ctx.Err() == nil {
			health.lost(err) // the reflector backs off and lists again
		}
	}); err != nil {
		return fmt.Errorf("podwatch: set watch error handler: %w", err)
	}
	queue := workqueue.NewTyped[string]()

	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.enqueue(queue, obj) },
		UpdateFunc: func(_, obj any) { w.enqueue(queue, obj) },
		DeleteFunc: func(obj any) {
			// Enqueued so that the worker, which owns the state, forgets the pod.
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				queue.Add(key)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("podwatch: add event handler: %w", err)
	}

	informerDone := make(chan struct{})
	go func() { // owned by Run: ends when runCtx is cancelled
		defer close(informerDone)
		informer.RunWithContext(runCtx)
	}()

	workerDone := make(chan struct{})
	workerStarted := false
	// stop ends the informer and the worker and waits for both, within the shutdown timeout.
	stop := func() error {
		w.indexer.Store(nil) // a stopped informer's cache goes stale
		cancel()
		queue.ShutDown() // the worker drains what is queued, then returns
		stopped := make(chan struct{})
		go func() {
			if workerStarted {
				<-workerDone
			}
			<-informerDone
			close(stopped)
		}()
		timer := time.NewTimer(w.shutdownTimeout)
		defer timer.Stop()
		select {
		case <-stopped:
			return nil
		case <-timer.C:
			return fmt.Errorf("podwatch: handler or informer still running %s after stop", w.shutdownTimeout)
		}
	}

	if !w.waitForSync(runCtx, informer.HasSynced, reg.HasSynced) {
		w.log.Info("stopping pod watch before the pod cache synced")
		return stop()
	}
	health.synced()
	w.log.Info("watching pods", "selector", selector)
	indexer := informer.GetIndexer()
	w.indexer.Store(&indexer)

	workerStarted = true
	go func() {
		defer close(workerDone)
		w.work(queue, informer.GetIndexer())
	}()

	<-ctx.Done()
	w.log.Info("stopping pod watch")
	return stop()
}

// PodByUID returns a copy of the cached (trimmed, see Watcher) pod with uid, if the watcher
// runs, its cache has synced and the pod is bound to this node. It is safe to call from any
// goroutine. A miss means "not known here", not "gone": the API may be unreachable.
func (w *Watcher) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	ip := w.indexer.Load()
	if ip == nil || uid == "" {
		return nil, false
	}
	objs, err := (*ip).ByIndex(uidIndex, string(uid))
	if err != nil {
		return nil, false
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok && pod.UID == uid && pod.Spec.NodeName == w.nodeName {
			return pod.DeepCopy(), true
		}
	}
	return nil, false
}

func podUIDIndex(obj any) ([]string, error) {
	if pod, ok := obj.(*corev1.Pod); ok && pod.UID != "" {
		return []string{string(pod.UID)}, nil
	}
	return nil, nil
}

// waitForSync waits until the pod cache has synced (true) or ctx ends (false). Past the sync
// timeout it warns, once, and keeps waiting.
func (w *Watcher) waitForSync(ctx context.Context, synced ...cache.InformerSynced) bool {
	start := time.Now()
	syncCtx, syncCancel := context.WithTimeout(ctx, w.syncTimeout)
	ok := cache.WaitForCacheSync(syncCtx.Done(), synced...)
	syncCancel()
	if ok || ctx.Err() != nil {
		return ok
	}
	w.log.Warn("pod cache not synced: the API server does not answer; still retrying. "+
		"CSI calls are served meanwhile; pods that finish now are acted on once it answers",
		"after", w.syncTimeout.String())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return false
	}
	w.log.Info("pod cache synced", "after", time.Since(start).Round(time.Millisecond).String())
	return true
}

// listWatch lists and watches this node's pods, reporting each request's outcome to health.
// It is built here rather than by an informer factory so that the outcome of every request
// is seen: the reflector retries a refused watch internally, without telling its error
// handler, so the handler alone would miss the most common outage.
func (w *Watcher) listWatch(selector string, health *watchHealth) *cache.ListWatch {
	pods := w.client.CoreV1().Pods(metav1.NamespaceAll)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			list, err := pods.List(ctx, o)
			health.observe(ctx, opList, err)
			if err != nil {
				return nil, err // not a typed nil *PodList in a non-nil interface
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			wi, err := pods.Watch(ctx, o)
			health.observe(ctx, opWatch, err)
			return wi, err
		},
	}
}

// watchHealth tracks whether the pod watch is in step with the API server, for the
// metricscatalog.WatchSynced gauge and for one log line per change (not one per failed request: the
// reflector retries every second or so during an outage).
type watchHealth struct {
	metrics *Metrics
	log     *slog.Logger

	mu          sync.Mutex
	initialSync bool // the cache has synced once
	ok          bool // the latest request succeeded
}

// observe records the outcome of one list or watch request; errors after ctx ended are the
// informer stopping, not the API failing.
func (h *watchHealth) observe(ctx context.Context, op string, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	if err != nil {
		h.metrics.watchError(op)
		h.lost(err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ok && h.initialSync {
		h.log.Info("pod watch in step with the API server again")
	}
	h.ok = true
	h.metrics.setWatchSynced(h.initialSync)
}

// lost records a failure of the watch.
func (h *watchHealth) lost(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ok && h.initialSync {
		h.log.Warn("pod watch lost the API server; retrying. CSI calls are not affected; pods that finish meanwhile are acted on once it answers", "err", err)
	}
	h.ok = false
	h.metrics.setWatchSynced(false)
}

// synced records the first sync of the cache.
func (h *watchHealth) synced() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.initialSync, h.ok = true, true
	h.metrics.setWatchSynced(true)
}

// enqueue queues the key of a pod of this node that uses the driver. The node check repeats
// the server-side field selector: the API server honours it, but fake clients and caches in
// tests do not, and a node plugin acting on another node's pod would end the wrong sidecar.
func (w *Watcher) enqueue(queue workqueue.TypedInterface[string], obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != w.nodeName || !driverpod.Uses(pod, w.driverName) {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		queue.Add(key)
	}
}

// work processes queued pod keys until the queue is shut down and drained.
func (w *Watcher) work(queue workqueue.TypedInterface[string], indexer cache.Indexer) {
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return
		}
		w.process(key, indexer)
		queue.Done(key)
	}
}

// process evaluates the current cached state of one pod. It reads the cache rather than the
// notified object so that a burst of updates collapses into one evaluation of the newest
// state, and reports every condition that holds (see Handler).
func (w *Watcher) process(key string, indexer cache.Indexer) {
	obj, exists, err := indexer.GetByKey(key)
	if err != nil || !exists {
		return
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != w.nodeName || !driverpod.Uses(pod, w.driverName) {
		return
	}
	log := w.log.With("pod", key, "uid", pod.UID)

	if ih, ok := w.handler.(InitHandler); ok && lifecycle.InitContainersSucceeded(pod) {
		ih.InitContainersSucceeded(pod.DeepCopy())
	}
	if dh, ok := w.handler.(DeletionHandler); ok && pod.DeletionTimestamp != nil {
		dh.PodDeleting(pod.DeepCopy())
	}
	if d := lifecycle.Decide(pod); d.Done {
		w.handler.WorkloadDone(pod.DeepCopy(), d)
	} else {
		log.Debug("workload not done", "rule", d.Rule, "reason", d.Reason)
		if th, ok := w.handler.(TerminationHandler); ok {
			if fd, follow := lifecycle.NeedsRuntimeFollow(pod); follow {
				th.WorkloadTerminating(pod.DeepCopy(), fd)
			}
		}
	}
	if lh, ok := w.handler.(LatencyHandler); ok {
		if mode, d, ok := sidecarExitLatency(pod); ok {
			lh.SidecarExited(pod.DeepCopy(), mode, d)
		}
	}
	if run := lifecycle.SidecarFailedRun(pod); run != "" {
		if failed, code, msg := lifecycle.SidecarFailure(pod); failed {
			w.handler.SidecarFailed(pod.DeepCopy(), run, code, msg)
		}
	}
}

// trimPod is the informer's transform: lifecycle.Trim, the one view of a pod the node
// plugin keeps, so that a node with many large pods costs little memory. A tombstone
// (cache.DeletedFinalStateUnknown) passes unchanged.
func trimPod(driverName string) cache.TransformFunc {
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		return lifecycle.Trim(pod, driverName), nil
	}
}

// sidecarExitLatency measures, from the pod's status, the time from the last workload
// container's finish to the sidecar's clean exit. The kubelet reports these times with
// one-second precision, so the figure is coarse; the sidecar's own metric is precise.
func sidecarExitLatency(pod *corev1.Pod) (mode string, d time.Duration, ok bool) {
	mode = lifecycle.SidecarMode(pod)
	statuses := pod.Status.ContainerStatuses
	if mode == contract.ModeNative {
		statuses = pod.Status.InitContainerStatuses
	}
	var sidecarDone time.Time
	for i := range statuses {
		if t := statuses[i].State.Terminated; statuses[i].Name == contract.SidecarContainerName && t != nil && t.ExitCode == 0 {
			sidecarDone = t.FinishedAt.Time
		}
	}
	if mode == "" || sidecarDone.IsZero() {
		return "", 0, false
	}
	var workloadDone time.Time
	for _, name := range lifecycle.WorkloadContainers(pod) {
		var t *corev1.ContainerStateTerminated
		for i := range pod.Status.ContainerStatuses {
			if pod.Status.ContainerStatuses[i].Name == name {
				t = pod.Status.ContainerStatuses[i].State.Terminated
			}
		}
		if t == nil {
			return "", 0, false
		}
		if t.FinishedAt.After(workloadDone) {
			workloadDone = t.FinishedAt.Time
		}
	}
	if workloadDone.IsZero() {
		return "", 0, false
	}
	return mode, max(sidecarDone.Sub(workloadDone), 0), true
}

// DriverPods returns copies of the cached (trimmed, see Watcher) pods of this node that use
// the driver (driverpod.Uses), or nil while the watch has not synced. Safe from any goroutine.
func (w *Watcher) DriverPods() []*corev1.Pod {
	ip := w.indexer.Load()
	if ip == nil {
		return nil
	}
	var out []*corev1.Pod
	for _, obj := range (*ip).List() {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName == w.nodeName && driverpod.Uses(pod, w.driverName) {
			out = append(out, pod.DeepCopy())
		}
	}
	return out
}
