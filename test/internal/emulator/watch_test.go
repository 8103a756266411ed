package emulator

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
)

// An upload whose body is slow to arrive (a client starved of CPU, or stopped halfway) holds
// up that upload alone: the other clients of the emulator are answered meanwhile. Without
// the watch reading the body first, fake-gcs-server reads it under the lock every bucket
// shares, and the bucket GET below waits for the whole upload.
func TestSlowUploaderStallsNobodyElse(t *testing.T) {
	s, err := Start("127.0.0.1", 0, "slow", "other")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	pr, pw := io.Pipe()
	uploaded := make(chan int, 1)
	go func() { // ends when the body ends (below)
		res, err := http.Post(s.URL+"/upload/storage/v1/b/slow/o?uploadType=media&name=x", "application/octet-stream", pr)
		if err != nil {
			uploaded <- 0
			return
		}
		res.Body.Close()
		uploaded <- res.StatusCode
	}()
	if _, err := pw.Write([]byte("first half ")); err != nil {
		t.Fatal(err)
	}
	// The upload is in the emulator, its body half sent: another client asks for a bucket.
	waitInFlight(t, s.watch, 1)
	answered := make(chan int, 1)
	go func() { // ends with the request: its client times out
		c := &http.Client{Timeout: 5 * time.Second}
		res, err := c.Get(s.URL + "/storage/v1/b/other")
		if err != nil {
			answered <- 0
			return
		}
		res.Body.Close()
		answered <- res.StatusCode
	}()
	select {
	case code := <-answered:
		if code != http.StatusOK {
			t.Fatalf("GET of another bucket during a slow upload: status %d, want 200", code)
		}
	case <-time.After(3 * time.Second):
		pw.Close()
		t.Fatal("GET of another bucket waited for a slow upload to end")
	}
	if _, err := pw.Write([]byte("second half")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if code := <-uploaded; code != http.StatusOK {
		t.Fatalf("the slow upload: status %d, want 200", code)
	}
	code, body := do(t, http.MethodGet, s.URL+"/download/storage/v1/b/slow/o/x?alt=media", "")
	if code != http.StatusOK || body != "first half second half" {
		t.Fatalf("the slow upload's object: %d %q", code, body)
	}
}

// A request that takes longer than slowRequest is logged at its end with what it was; one
// in flight for longer than stuckRequest is named while it is, once, and with every
// goroutine's stack past stacksAfter (once per stacksEvery), so that a stalled emulator
// says what stalls it.
func TestSlowAndStuckRequestsAreLogged(t *testing.T) {
	var out syncbuf.Buffer
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stuck" {
			<-release
		}
		w.WriteHeader(http.StatusTeapot)
	})
	clock := time.Unix(1000, 0)
	var clockMu sync.Mutex
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }
	w := newWatch(h, slog.New(slog.NewTextHandler(&out, nil)), now)
	defer w.close()

	served := make(chan struct{})
	go func() { // ends when release is closed
		defer close(served)
		req, _ := http.NewRequest(http.MethodPut, "/stuck", strings.NewReader("body"))
		w.ServeHTTP(discard{}, req)
	}()
	waitInFlight(t, w, 1)
	w.check()
	if strings.Contains(out.String(), "stuck") {
		t.Fatalf("a request in flight for no time was reported stuck:\n%s", out.String())
	}
	advance(stuckRequest)
	w.check()
	w.check()
	if n := strings.Count(out.String(), "storage requests stuck"); n != 1 || !strings.Contains(out.String(), "PUT /stuck") {
		t.Fatalf("a stuck request: %d reports, want 1 naming it:\n%s", n, out.String())
	}
	if strings.Contains(out.String(), "goroutine ") {
		t.Fatalf("stacks logged before stacksAfter:\n%s", out.String())
	}
	advance(stacksAfter)
	w.check()
	w.check()
	if n := strings.Count(out.String(), "goroutines while a request is stuck"); n != 1 || !strings.Contains(out.String(), "goroutine ") {
		t.Fatalf("stacks past stacksAfter: %d dumps, want 1 (once per stacksEvery):\n%s", n, out.String())
	}
	if n := strings.Count(out.String(), "storage requests stuck"); n != 2 {
		t.Fatalf("a request stuck past stacksAfter: named %d times, want twice (at stuckRequest, at stacksAfter):\n%s", n, out.String())
	}
	close(release)
	<-served
	if !strings.Contains(out.String(), `msg="slow storage request" method=PUT path=/stuck status=418`) {
		t.Fatalf("the slow request's end is not logged with its method, path and status:\n%s", out.String())
	}
	w.mu.Lock()
	left := len(w.inFlight)
	w.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d requests still counted in flight after they ended", left)
	}
}

// waitInFlight waits (bounded) until w has n requests in flight.
func waitInFlight(t *testing.T, w *watch, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.mu.Lock()
		got := len(w.inFlight)
		w.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
