package main

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// lister lists the objects of one kind and label and watches them from a list's version.
type lister struct {
	list  func(ctx context.Context) ([]runtime.Object, string, error)
	watch func(ctx context.Context, rv string) (watch.Interface, error)
}

func (s *scale) podLister(selector string) lister {
	return listerOf(selector,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.cs.CoreV1().Pods(s.ns).List(ctx, o)
		}, s.cs.CoreV1().Pods(s.ns).Watch)
}

func (s *scale) jobLister(selector string) lister {
	return listerOf(selector,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return s.cs.BatchV1().Jobs(s.ns).List(ctx, o)
		}, s.cs.BatchV1().Jobs(s.ns).Watch)
}

// listerOf is the lister of one typed client's list and watch, for the objects with the
// label selector: the items and version of any list kind (meta.ExtractList).
func listerOf(selector string, list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) lister {
	return lister{
		list: func(ctx context.Context) ([]runtime.Object, string, error) {
			l, err := list(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return nil, "", err
			}
			items, err := meta.ExtractList(l)
			if err != nil {
				return nil, "", err
			}
			acc, err := meta.ListAccessor(l)
			if err != nil {
				return nil, "", err
			}
			return items, acc.GetResourceVersion(), nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return watchFn(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
		},
	}
}

// follow hands every object that l's list and watch yield (not deletions) to on, on this
// goroutine, until ctx ends. The API server ends watches (every 30-60 min, and with 410 Gone
// after a compaction): it lists and watches again, at most maxWatchRestarts times.
func follow(ctx context.Context, l lister, on func(runtime.Object)) {
	for range maxWatchRestarts {
		if ctx.Err() != nil {
			return
		}
		items, rv, err := l.list(ctx)
		if err != nil {
			sleep(ctx, watchRetryDelay)
			continue
		}
		for _, o := range items {
			on(o)
		}
		w, err := l.watch(ctx, rv)
		if err != nil {
			sleep(ctx, watchRetryDelay)
			continue
		}
	events: // until the watch ends, or ctx does (a watch need not close its channel then)
		for {
			select {
			case <-ctx.Done():
				break events
			case ev, ok := <-w.ResultChan():
				if !ok || ev.Type == watch.Error {
					break events
				}
				if ev.Type != watch.Deleted {
					on(ev.Object)
				}
			}
		}
		w.Stop()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
