package sidecar

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
)

// fastRetry is preflightRetry scaled down for tests.
var fastRetry = retryPolicy{attempt: 2 * time.Second, first: 10 * time.Millisecond, max: 40 * time.Millisecond, budget: 3 * time.Second}

// flakyStorage answers each bucket's first requests as fail says, then 200.
type flakyStorage struct {
	mu    sync.Mutex
	calls map[string]int
	fail  func(bucket string, call int, w http.ResponseWriter) bool
}

func (f *flakyStorage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bucket := strings.TrimPrefix(r.URL.Path, "/storage/v1/b/")
	f.mu.Lock()
	f.calls[bucket]++
	n := f.calls[bucket]
	f.mu.Unlock()
	if f.fail(bucket, n, w) {
		return
	}
	_, _ = w.Write([]byte(`{"name":"` + bucket + `"}`))
}

func (f *flakyStorage) count(bucket string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[bucket]
}

func newFlaky(t *testing.T) (*flakyStorage, string) {
	stalled := make(chan struct{})
	f := &flakyStorage{calls: map[string]int{}, fail: func(bucket string, call int, w http.ResponseWriter) bool {
		switch {
		case bucket == "busy" && call <= 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		case bucket == "throttled" && call == 1:
			w.WriteHeader(http.StatusTooManyRequests)
		case bucket == "stalled" && call == 1:
			<-stalled // past the attempt's bound: the client gives up first
			return true
		case bucket == "down":
			w.WriteHeader(http.StatusBadGateway)
		case bucket == "down-then-stalled" && call == 1:
			w.WriteHeader(http.StatusBadGateway)
		case bucket == "down-then-stalled":
			<-stalled // until the attempt's bound, cut by the budget, ends it
			return true
		case bucket == "gone":
			w.WriteHeader(http.StatusNotFound)
		case bucket == "forbidden":
			w.WriteHeader(http.StatusForbidden)
		default:
			return false
		}
		return true
	}}
	srv := httptest.NewServer(f)
	t.Cleanup(func() { close(stalled); srv.Close() }) // the stalled handler first
	return f, srv.URL + "/storage/v1/"
}

// A bucket check that meets a busy, throttling or stalled endpoint tries again and the
// volume starts: one slow answer no longer fails a volume for good (in shared mode, every pod
// bound to its mount), as it did in CI when the emulator stalled for a while. Each retry is
// logged with its cause.
func TestBucketCheckRetriesWhatARetryMayNotSee(t *testing.T) {
	f, ep := newFlaky(t)
	for bucket, want := range map[string]int{"busy": 3, "throttled": 2, "stalled": 2} {
		var out syncbuf.Buffer
		p := fastRetry
		if bucket == "stalled" {
			p.attempt = time.Second // the stalled request's bound; the next one answers at once
		}
		err := checkBucketRetrying(context.Background(), p, slog.New(slog.NewTextHandler(&out, nil)), direct, ep, bucket, "", "")
		if err != nil {
			t.Errorf("%s: %v, want it to pass after retries", bucket, err)
		}
		if got := f.count(bucket); got != want {
			t.Errorf("%s: %d requests, want %d", bucket, got, want)
		}
		if n := strings.Count(out.String(), "trying again"); n != want-1 || !strings.Contains(out.String(), "passed after retries") {
			t.Errorf("%s: the log has %d retries (want %d) and the pass:\n%s", bucket, n, want-1, out.String())
		}
	}
}

// What a retry cannot change fails at once: a missing bucket, a refused identity.
func TestBucketCheckFailsAtOnceWhenARetryCannotHelp(t *testing.T) {
	f, ep := newFlaky(t)
	for bucket, want := range map[string]string{"gone": "does not exist", "forbidden": "may not read it"} {
		err := checkBucketRetrying(context.Background(), fastRetry, slog.New(slog.DiscardHandler), direct, ep, bucket, "", "")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", bucket, err, want)
		}
		if got := f.count(bucket); got != 1 {
			t.Errorf("%s: %d requests, want 1", bucket, got)
		}
	}
}

// An endpoint that keeps failing fails the volume within the budget, with the last cause and
// how many attempts were made; a refused connection is retried too (an endpoint restarting).
func TestBucketCheckGivesUpAtItsBudget(t *testing.T) {
	f, ep := newFlaky(t)
	p := fastRetry
	p.budget = 300 * time.Millisecond
	start := time.Now()
	err := checkBucketRetrying(context.Background(), p, slog.New(slog.DiscardHandler), direct, ep, "down", "", "")
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "502") || !strings.Contains(err.Error(), "attempts in") {
		t.Fatalf("an endpoint answering 502: %v, want the status and the attempts", err)
	}
	if n := f.count("down"); n < 3 {
		t.Errorf("%d attempts in %s, want several", n, p.budget)
	}
	if took > p.budget+p.attempt {
		t.Errorf("gave up after %s, past its budget %s and one attempt", took, p.budget)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/storage/v1/"
	ln.Close()
	err = checkBucketRetrying(context.Background(), p, slog.New(slog.DiscardHandler), direct, closed, "x", "", "")
	if err == nil || !strings.Contains(err.Error(), "unreachable") || strings.Contains(err.Error(), " 1 attempts") {
		t.Fatalf("a refused connection: %v, want it unreachable after several attempts", err)
	}
}

// An attempt cut short by what the budget left it says only "deadline exceeded": the final
// error names the attempt before it (the endpoint's 502) and that the last one was cut.
func TestBucketCheckNamesTheLastAnswerWhenTheBudgetCutsAnAttempt(t *testing.T) {
	f, ep := newFlaky(t)
	p := fastRetry
	p.budget = 500 * time.Millisecond
	err := checkBucketRetrying(context.Background(), p, slog.New(slog.DiscardHandler), direct, ep, "down-then-stalled", "", "")
	if err == nil || !strings.Contains(err.Error(), "502") || !strings.Contains(err.Error(), "cut short by the 500ms budget") ||
		!strings.Contains(err.Error(), "2 attempts in") {
		t.Fatalf("a 502, then an attempt the budget cut: %v; want the 502, the cut and 2 attempts", err)
	}
	if n := f.count("down-then-stalled"); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
}

// The sidecar told to end while the check waits to try again stops waiting.
func TestBucketCheckStopsWithItsContext(t *testing.T) {
	_, ep := newFlaky(t)
	p := fastRetry
	p.first, p.max, p.budget = time.Hour, time.Hour, 2*time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() { done <- checkBucketRetrying(ctx, p, slog.New(slog.DiscardHandler), direct, ep, "down", "", "") }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stopped") {
			t.Fatalf("stopped mid-wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the check kept waiting after its context ended")
	}
}
