package emulator

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"time"
)

const (
	// slowRequest is how long a request may take before its end is logged: the lifecycle
	// tests' own preflight gives up after 10 s, so anything near that must leave a trace.
	slowRequest = 2 * time.Second
	// stuckCheck is how often the watchdog looks at the requests in flight.
	stuckCheck = 5 * time.Second
	// stuckRequest is how long a request may be in flight before the watchdog names it.
	stuckRequest = 5 * time.Second
	// stacksAfter is how long a request may be in flight before the watchdog also logs every
	// goroutine's stack (once per stacksEvery): that names what holds it up, e.g.
	// fake-gcs-server's one lock.
	stacksAfter = 15 * time.Second
	// stacksEvery bounds how often the stacks are logged.
	stacksEvery = 5 * time.Minute
	// maxStacks bounds one stack dump.
	maxStacks = 1 << 20
	// maxPath bounds a path in a log line.
	maxPath = 200
	// bodyReadTimeout bounds the read of one request's body: a client that stops halfway
	// is answered 400 instead of being waited for.
	bodyReadTimeout = 5 * time.Minute
)

// watch is the emulator's request watch: it reads each request's body before fake-gcs-server
// sees it and says which requests are slow or stuck. fake-gcs-server's memory backend has one
// lock for every bucket and reads a media or XML upload's body while it holds it
// (storageMemory.CreateObject), so one slow uploader stalled every client of the emulator:
// a CI run saw every storage request of every test time out for about 100 s with nothing in
// the emulator's log to say why.
type watch struct {
	next http.Handler
	log  *slog.Logger
	now  func() time.Time

	mu         sync.Mutex
	seq        uint64
	inFlight   map[uint64]*request
	lastStacks time.Time

	stop chan struct{}
	done chan struct{}
}

// request is one request in flight.
type request struct {
	method, path string
	start        time.Time
	// reported: named as stuck (past stuckRequest), then again past stacksAfter, no more.
	reported int
}

// newWatch starts the watchdog with the clock now; close stops it.
func newWatch(next http.Handler, log *slog.Logger, now func() time.Time) *watch {
	w := &watch{next: next, log: log, now: now, inFlight: map[uint64]*request{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run() // owned by w: ends at close
	return w
}

func (w *watch) close() {
	close(w.stop)
	<-w.done
}

func (w *watch) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	if len(path) > maxPath {
		path = path[:maxPath] + "..."
	}
	w.mu.Lock()
	w.seq++
	id := w.seq
	req := &request{method: r.Method, path: path, start: w.now()}
	w.inFlight[id] = req
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.inFlight, id)
		w.mu.Unlock()
	}()
	if r.Body != nil && r.Body != http.NoBody {
		// One buffer of the announced size (no doubling while it grows): fake-gcs-server
		// copies it once more when it stores the object.
		var buf bytes.Buffer
		if r.ContentLength > 0 {
			buf.Grow(int(r.ContentLength))
		}
		rc := http.NewResponseController(rw)
		_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
		_, err := buf.ReadFrom(r.Body)
		_ = rc.SetReadDeadline(time.Time{})
		r.Body.Close()
		if err != nil {
			// The client went away or stalled mid-body: nothing to store.
			http.Error(rw, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
		r.ContentLength = int64(buf.Len())
	}
	sw := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
	w.next.ServeHTTP(sw, r)
	if d := w.now().Sub(req.start); d >= slowRequest {
		w.log.Warn("slow storage request", "method", req.method, "path", req.path, "status", sw.status,
			"ms", d.Milliseconds(), "requestBytes", r.ContentLength, "responseBytes", sw.bytes)
	}
}

// run logs, every stuckCheck, the requests in flight for longer than stuckRequest (each once
// then, and once more past stacksAfter), and the goroutines' stacks when one has been for
// longer than stacksAfter (once per stacksEvery).
func (w *watch) run() {
	defer close(w.done)
	t := time.NewTicker(stuckCheck)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.check()
		}
	}
}

func (w *watch) check() {
	now := w.now()
	w.mu.Lock()
	var stuck []string
	var oldest time.Duration
	for _, r := range w.inFlight {
		d := now.Sub(r.start)
		if d < stuckRequest {
			continue
		}
		oldest = max(oldest, d)
		if r.reported == 0 || (r.reported == 1 && d >= stacksAfter) {
			stuck = append(stuck, fmt.Sprintf("%s %s (%.0fs)", r.method, r.path, d.Seconds()))
			r.reported++
		}
	}
	inFlight := len(w.inFlight)
	dumpStacks := oldest >= stacksAfter && now.Sub(w.lastStacks) >= stacksEvery
	if dumpStacks {
		w.lastStacks = now
	}
	w.mu.Unlock()
	if len(stuck) == 0 {
		return
	}
	sort.Strings(stuck)
	if len(stuck) > 20 {
		stuck = append(stuck[:20], fmt.Sprintf("and %d more", len(stuck)-20))
	}
	w.log.Warn("storage requests stuck", "inFlight", inFlight, "oldestSeconds", int(oldest.Seconds()), "requests", stuck)
	if dumpStacks {
		buf := make([]byte, maxStacks)
		buf = buf[:runtime.Stack(buf, true)]
		w.log.Warn("goroutines while a request is stuck", "stacks", string(buf))
	}
}

// statusWriter records a response's status and size.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// Flush passes a flush on: downloads stream.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
