package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// soakResult is the soak's outcome and figures.
type soakResult struct {
	jobs int
	// took is each completed Job's time from before its Create call to its Complete
	// condition seen (this machine's clock).
	took    []time.Duration
	lost    []string
	objects objectCheck
	elapsed time.Duration
	m       measured
}

func (r *soakResult) report(rep *report) {
	for _, l := range r.lost {
		rep.lose("soak: %s", l)
	}
	for _, b := range r.objects.bad {
		rep.lose("soak: object %s", b)
	}
	fmt.Printf("scale:   %d/%d Jobs Complete, %d/%d objects with their bytes, %.1f Jobs/min (node plugin CPU %.2f s, peak RSS %.1f MiB)\n",
		len(r.took), r.jobs, r.objects.ok, r.objects.want, r.perMinute(), r.m.cpu, r.m.peaks.nodeRSS)
}

func (r *soakResult) perMinute() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(len(r.took)) / r.elapsed.Minutes()
}

// jobOutcome reads a Job's terminal condition: done once Complete or Failed is true.
func jobOutcome(j *batchv1.Job) (done, ok bool, why string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true, ""
		case batchv1.JobFailed:
			return true, false, strings.TrimSpace(c.Reason + " " + c.Message)
		}
	}
	return false, false, ""
}

// jobEnd is a Job's end as the watch saw it.
type jobEnd struct {
	at  time.Time
	ok  bool
	why string
}

// jobWaiters hands each Job's end to the one worker waiting for it.
type jobWaiters struct {
	mu sync.Mutex
	m  map[string]chan jobEnd
}

func (w *jobWaiters) add(name string) chan jobEnd {
	c := make(chan jobEnd, 1)
	w.mu.Lock()
	w.m[name] = c
	w.mu.Unlock()
	return c
}

func (w *jobWaiters) remove(name string) {
	w.mu.Lock()
	delete(w.m, name)
	w.mu.Unlock()
}

func (w *jobWaiters) see(o runtime.Object) {
	j, ok := o.(*batchv1.Job)
	if !ok {
		return
	}
	done, succeeded, why := jobOutcome(j)
	if !done {
		return
	}
	w.mu.Lock()
	c := w.m[j.Name]
	delete(w.m, j.Name)
	w.mu.Unlock()
	if c != nil {
		c <- jobEnd{at: time.Now(), ok: succeeded, why: why}
	}
}

func (s *scale) job(name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: map[string]string{runLabel: jobRun}},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32(0)), Completions: new(int32(1)), Parallelism: new(int32(1)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{runLabel: jobRun}, Annotations: sidecarAnnotations()},
				Spec:       s.workloadSpec(name+".bin", 1, s.buckets[:1], s.opts.jobB),
			},
		},
	}
}

// soak runs -jobs Jobs, -jobs-parallel at a time, each deleted (with its pod) once complete,
// bounded by -soak-timeout as a whole and jobWait each; then checks their objects.
func (s *scale) soak(ctx context.Context, np nodePlugin) (*soakResult, error) {
	r := &soakResult{jobs: s.opts.jobs}
	sctx, cancel := context.WithTimeout(ctx, s.opts.soakTimeout)
	defer cancel()
	waiters := &jobWaiters{m: map[string]chan jobEnd{}}
	wctx, stopWatch := context.WithCancel(sctx)
	watched := make(chan struct{})
	go func() { // ends with wctx
		defer close(watched)
		follow(wctx, s.jobLister(runLabel+"="+jobRun), waiters.see)
	}()
	defer func() { stopWatch(); <-watched }()

	var mu sync.Mutex
	var succeeded []string
	start := time.Now()
	var last time.Time
	m, err := s.measure(ctx, np, func() error {
		idx := make(chan int)
		var wg sync.WaitGroup
		for range s.opts.jobsParallel {
			wg.Go(func() { // ends when idx is closed
				for i := range idx {
					name := fmt.Sprintf("job-%04d", i)
					end, err := s.runJob(sctx, waiters, name)
					mu.Lock()
					if err != nil {
						r.lost = append(r.lost, fmt.Sprintf("Job %s: %v", name, err))
					} else {
						r.took = append(r.took, end)
						succeeded = append(succeeded, name+".bin")
						last = time.Now()
					}
					mu.Unlock()
				}
			})
		}
		sent := 0
	feed:
		for ; sent < s.opts.jobs; sent++ {
			select {
			case idx <- sent:
			case <-sctx.Done():
				break feed
			}
		}
		close(idx)
		wg.Wait()
		if sent < s.opts.jobs {
			r.lost = append(r.lost, fmt.Sprintf("%d Jobs never started: the soak's bound %s was reached", s.opts.jobs-sent, s.opts.soakTimeout))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.m = m
	if !last.IsZero() {
		r.elapsed = last.Sub(start)
	}
	r.objects = s.checkObjects(ctx, s.buckets[0], succeeded, s.opts.jobB)
	slices.Sort(r.lost)
	return r, s.deleteAll(ctx)
}

// runJob creates one Job, waits for its end, and deletes it (its pod with it); it returns the
// time from before the Create call to the Complete condition seen.
func (s *scale) runJob(ctx context.Context, waiters *jobWaiters, name string) (time.Duration, error) {
	ended := waiters.add(name) // before Create: the end cannot be missed
	defer waiters.remove(name)
	t0 := time.Now()
	if _, err := s.cs.BatchV1().Jobs(s.ns).Create(ctx, s.job(name), metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		bg := metav1.DeletePropagationBackground
		_ = s.cs.BatchV1().Jobs(s.ns).Delete(c, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	}()
	t := time.NewTimer(jobWait)
	defer t.Stop()
	select {
	case e := <-ended:
		if !e.ok {
			return 0, fmt.Errorf("failed: %s", e.why)
		}
		return e.at.Sub(t0), nil
	case <-t.C:
		return 0, fmt.Errorf("not complete within %s", jobWait)
	case <-ctx.Done():
		return 0, fmt.Errorf("not complete when the soak's bound %s was reached", s.opts.soakTimeout)
	}
}
