package nodeplugin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitBound bounds every wait of these tests; generous for -race on shared cores.
const waitBound = 20 * time.Second

// A pod watch that ends early, for whatever reason, is started again and never ends the
// supervision (and with it the node plugin) before ctx does.
func TestSuperviseWatchRestartsAnEndedWatch(t *testing.T) {
	var runs atomic.Int32
	started := make(chan struct{})
	run := func(ctx context.Context) error {
		if runs.Add(1) < 3 {
			return errors.New("podwatch: something went wrong")
		}
		close(started)
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		superviseWatch(ctx, run, restartBackoff{first: time.Millisecond, max: 5 * time.Millisecond},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	select {
	case <-started:
	case <-done:
		t.Fatal("supervision ended after the watch failed")
	case <-time.After(waitBound):
		t.Fatal("the watch was not started again")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(waitBound):
		t.Fatal("supervision did not end with its context")
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("watch ran %d times, want 3", n)
	}
}

// While it waits to restart a watch, the supervision ends as soon as ctx does.
func TestSuperviseWatchStopsDuringBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	failed := make(chan struct{})
	var once sync.Once
	done := make(chan struct{})
	go func() {
		defer close(done)
		superviseWatch(ctx, func(context.Context) error {
			once.Do(func() { close(failed) })
			return errors.New("boom")
		}, restartBackoff{first: time.Hour, max: time.Hour}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	select {
	case <-failed:
	case <-time.After(waitBound):
		t.Fatal("the watch was not run")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(waitBound):
		t.Fatal("supervision waited out its backoff after ctx ended")
	}
}

// A pod watch that returns nil before its context ended is started again too: only ctx
// ends the supervision.
func TestSuperviseWatchRestartsAWatchThatEndedCleanly(t *testing.T) {
	var runs atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		superviseWatch(ctx, func(ctx context.Context) error {
			if runs.Add(1) < 3 {
				return nil // ended early without an error: still a bug to ride out
			}
			<-ctx.Done()
			return nil
		}, restartBackoff{first: time.Millisecond, max: 5 * time.Millisecond}, quietLog)
	}()
	for deadline := time.Now().Add(waitBound); runs.Load() < 3; time.Sleep(time.Millisecond) {
		select {
		case <-done:
			t.Fatal("supervision ended when the watch returned nil before ctx ended")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch was not started again")
		}
	}
	cancel()
	<-done
}
