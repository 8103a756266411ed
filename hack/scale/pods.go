package main

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// runSpec is one run of s.n pods.
type runSpec struct {
	name    string // "burst" or "waves"
	volumes bool
	// wave is the pods per wave (0: all at once), gap the pause after each wave's creation.
	wave int
	gap  time.Duration
}

func (r runSpec) id() string {
	if r.volumes {
		return r.name + "-vol"
	}
	return r.name + "-twin"
}

func (r runSpec) describe(n int) string {
	what := "twin (emptyDirs for volumes)"
	if r.volumes {
		what = "gcsfuse volumes"
	}
	if r.wave == 0 {
		return fmt.Sprintf("%s: %d pods at once, %s", r.name, n, what)
	}
	return fmt.Sprintf("%s: %d pods in waves of %d, %s apart, %s", r.name, n, r.wave, r.gap, what)
}

// podTimes are one pod's moments, on this machine's clock (the containers share it).
type podTimes struct {
	created, appStart, appExit, done time.Time
	// createCall is how long the Create call took (admission included).
	createCall time.Duration
}

// runResult is one run's outcome and figures.
type runResult struct {
	spec runSpec
	n    int
	// pods are the pods that succeeded, by name, with their moments.
	pods map[string]podTimes
	// lost lists the pods that did not succeed (or whose moments are missing), with why.
	lost []string
	// objects is the check of every succeeded volume pod's objects in the emulator.
	objects objectCheck
	m       measured
}

func (r *runResult) report(rep *report) {
	for _, l := range r.lost {
		rep.lose("%s: %s", r.spec.id(), l)
	}
	for _, b := range r.objects.bad {
		rep.lose("%s: object %s", r.spec.id(), b)
	}
	fmt.Printf("scale:   %d/%d pods Succeeded", len(r.pods), r.n)
	if r.spec.volumes {
		fmt.Printf(", %d/%d objects with their bytes", r.objects.ok, r.objects.want)
	}
	fmt.Printf(" (node plugin CPU %.2f s, peak RSS %.1f MiB)\n", r.m.cpu, r.m.peaks.nodeRSS)
}

// podState follows a run's pods (those labelled run): when each became terminal (on this
// machine's clock) and, for those that failed, why.
type podState struct {
	run      string
	mu       sync.Mutex
	terminal map[string]time.Time
	failed   map[string]string
	changed  chan struct{}
}

func newPodState(run string) *podState {
	return &podState{run: run, terminal: map[string]time.Time{}, failed: map[string]string{}, changed: make(chan struct{}, 1)}
}

func (st *podState) see(o runtime.Object) {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Labels[runLabel] != st.run || (p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed) {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, seen := st.terminal[p.Name]; seen {
		return
	}
	st.terminal[p.Name] = time.Now()
	if p.Status.Phase == corev1.PodFailed {
		st.failed[p.Name] = podFailure(p)
	}
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

func (st *podState) count() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.terminal)
}

// podFailure says why a pod failed: its message and its containers' non-zero exits.
func podFailure(p *corev1.Pod) string {
	parts := []string{"Failed"}
	if p.Status.Reason != "" || p.Status.Message != "" {
		parts = append(parts, strings.TrimSpace(p.Status.Reason+" "+p.Status.Message))
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			parts = append(parts, fmt.Sprintf("container %s exited %d (%s)", cs.Name, t.ExitCode, t.Reason))
		}
	}
	return strings.Join(parts, "; ")
}

// runPods creates s.n pods as spec says, waits (bounded by -timeout) until every one is
// terminal, reads the app's moments from its log, checks the objects of the volume pods, and
// deletes the pods.
func (s *scale) runPods(ctx context.Context, np nodePlugin, spec runSpec) (*runResult, error) {
	r := &runResult{spec: spec, n: s.n, pods: map[string]podTimes{}}
	rctx, cancel := context.WithTimeout(ctx, s.opts.timeout)
	defer cancel()
	st := newPodState(spec.id())
	wctx, stopWatch := context.WithCancel(rctx)
	watched := make(chan struct{})
	go func() { // ends with wctx
		defer close(watched)
		follow(wctx, s.podLister(runLabel+"="+spec.id()), st.see)
	}()
	defer func() { stopWatch(); <-watched }()

	var mu sync.Mutex
	var created atomic.Int64
	m, err := s.measure(ctx, np, func() error {
		create := func(i int) error {
			name := fmt.Sprintf("%s-%03d", spec.id(), i)
			t0 := time.Now()
			if _, err := s.cs.CoreV1().Pods(s.ns).Create(rctx, s.pod(spec.id(), name, i, spec.volumes), metav1.CreateOptions{}); err != nil {
				mu.Lock()
				r.lost = append(r.lost, fmt.Sprintf("pod %s: create: %v", name, err))
				mu.Unlock()
				return nil // the others still run
			}
			created.Add(1)
			mu.Lock()
			r.pods[name] = podTimes{created: t0, createCall: time.Since(t0)}
			mu.Unlock()
			return nil
		}
		for _, w := range waves(s.n, spec.wave) {
			_ = inParallel(w.count, func(i int) error { return create(w.first + i) })
			if w.first+w.count < s.n && spec.gap > 0 {
				sleep(rctx, spec.gap)
			}
		}
		for st.count() < int(created.Load()) {
			select {
			case <-st.changed:
			case <-rctx.Done():
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.m = m
	st.mu.Lock()
	for name := range r.pods {
		done, terminal := st.terminal[name]
		switch why, failed := st.failed[name]; {
		case !terminal:
			r.lost = append(r.lost, fmt.Sprintf("pod %s: not done within %s", name, s.opts.timeout))
			delete(r.pods, name)
		case failed:
			r.lost = append(r.lost, fmt.Sprintf("pod %s: %s", name, why))
			delete(r.pods, name)
		default:
			pt := r.pods[name]
			pt.done = done
			r.pods[name] = pt
		}
	}
	st.mu.Unlock()

	// The app's own START/EXIT lines (ms): the kubelet's timestamps have 1 s resolution.
	names := slices.Sorted(maps.Keys(r.pods))
	_ = inParallel(len(names), func(i int) error {
		c, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		start, exit, err := s.appMoments(c, names[i])
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			r.lost = append(r.lost, fmt.Sprintf("pod %s: %v", names[i], err))
			delete(r.pods, names[i])
			return nil
		}
		pt := r.pods[names[i]]
		pt.appStart, pt.appExit = start, exit
		r.pods[names[i]] = pt
		return nil
	})
	if spec.volumes {
		var a, b []string
		for i := range s.n {
			name := fmt.Sprintf("%s-%03d", spec.id(), i)
			if _, ok := r.pods[name]; !ok {
				continue
			}
			a = append(a, name+".bin")
			if volumesOf(i) == 2 {
				b = append(b, name+".bin")
			}
		}
		r.objects = s.checkObjects(ctx, s.buckets[0], a, s.opts.size)
		r.objects.add(s.checkObjects(ctx, s.buckets[1], b, s.opts.size))
	}
	slices.Sort(r.lost)
	return r, s.deleteAll(ctx)
}

// wave is one wave of a run: pods first to first+count-1.
type wave struct{ first, count int }

// waves splits n pods into waves of size (0: one wave of all).
func waves(n, size int) []wave {
	if size <= 0 || size >= n {
		return []wave{{0, n}}
	}
	var out []wave
	for first := 0; first < n; first += size {
		out = append(out, wave{first, min(size, n-first)})
	}
	return out
}

// inParallel runs fn(0) ... fn(n-1) on createWorkers goroutines, all of them to the end,
// and returns the first error (nil for none).
func inParallel(n int, fn func(i int) error) error {
	jobs := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range min(createWorkers, n) {
		wg.Go(func() { // ends when jobs is closed
			for i := range jobs {
				if err := fn(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	return <-errs
}

// burstResult is the admission burst's figures.
type burstResult struct {
	webhook, create []time.Duration
	apiServer       string
}

// admissionBurst creates s.n opted-in pods at once with a node selector no node has: the
// webhook admits them and they stay Pending, so the node is quiet and the figures are the
// admission's alone. The pods are deleted before it returns.
func (s *scale) admissionBurst(ctx context.Context) (burstResult, error) {
	var r burstResult
	apiBefore, err := apiServerMetrics(ctx, s.cs)
	if err != nil {
		return r, err
	}
	start := time.Now()
	lp := s.startLogPoller(ctx, start)
	var mu sync.Mutex
	err = inParallel(s.n, func(i int) error {
		p := s.pod("admission", fmt.Sprintf("admission-%03d", i), i, true)
		p.Spec.NodeSelector = map[string]string{"gcsfuse-csi.scale/no-such-node": "true"}
		t0 := time.Now()
		if _, err := s.cs.CoreV1().Pods(s.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
		mu.Lock()
		r.create = append(r.create, time.Since(t0))
		mu.Unlock()
		return nil
	})
	lines := lp.stop(ctx)
	if err != nil {
		return r, fmt.Errorf("admission burst: %w", err)
	}
	r.webhook = admissionLatencies(lines, start)
	r.apiServer = apiServerAdmissionP99(ctx, s.cs, apiBefore)
	return r, s.deleteAll(ctx)
}

var (
	startLine = regexp.MustCompile(`(?m)^START (\d+)$`)
	exitLine  = regexp.MustCompile(`(?m)^EXIT (\d+) `)
)

func (s *scale) appMoments(ctx context.Context, pod string) (start, exit time.Time, err error) {
	b, err := s.cs.CoreV1().Pods(s.ns).GetLogs(pod, &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
	if err != nil {
		return start, exit, fmt.Errorf("logs: %w", err)
	}
	return parseMoments(b)
}

// parseMoments reads the workload's START and EXIT lines (unix ms).
func parseMoments(b []byte) (start, exit time.Time, err error) {
	ms := func(re *regexp.Regexp) time.Time {
		if m := re.FindSubmatch(b); m != nil {
			v, _ := strconv.ParseInt(string(m[1]), 10, 64)
			return time.UnixMilli(v)
		}
		return time.Time{}
	}
	start, exit = ms(startLine), ms(exitLine)
	if start.IsZero() || exit.IsZero() {
		return start, exit, fmt.Errorf("no START/EXIT line in the app's log %q", b)
	}
	return start, exit, nil
}

// deleteAll deletes every Job and pod of this program and waits (bounded) until they are
// gone.
func (s *scale) deleteAll(ctx context.Context) error {
	bg := metav1.DeletePropagationBackground
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := s.cs.BatchV1().Jobs(s.ns).DeleteCollection(c, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{LabelSelector: runLabel}); err != nil {
		return err
	}
	if err := s.cs.CoreV1().Pods(s.ns).DeleteCollection(c, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: runLabel}); err != nil {
		return err
	}
	gone := func() bool {
		c, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		jobs, errJ := s.cs.BatchV1().Jobs(s.ns).List(c, metav1.ListOptions{LabelSelector: runLabel})
		pods, errP := s.cs.CoreV1().Pods(s.ns).List(c, metav1.ListOptions{LabelSelector: runLabel})
		return errJ == nil && errP == nil && len(jobs.Items) == 0 && len(pods.Items) == 0
	}
	for end := time.Now().Add(deleteWait); time.Now().Before(end); time.Sleep(deletePoll) {
		if gone() {
			return nil
		}
	}
	return fmt.Errorf("pods and Jobs of %s not gone after %s", s.ns, deleteWait)
}
