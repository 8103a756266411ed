package emulatorauth

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The kinds of storage request a Fault can be limited to (Fault.Op), named as a user thinks
// of what gcsfuse does: read an object's bytes, write one (any upload, compose, copy,
// rewrite, move), list a bucket, read or change metadata (an object's or the bucket's), delete.
const (
	OpRead     = "read"
	OpWrite    = "write"
	OpList     = "list"
	OpMetadata = "metadata"
	OpDelete   = "delete"
)

// Ops lists every operation a Fault may name.
var Ops = []string{OpRead, OpWrite, OpList, OpMetadata, OpDelete}

// MaxFaultDelay bounds Fault.DelayMS: a test that wants a backend slower than this wants it
// gone, which Drop or a status says better (and the emulator's watch dumps every goroutine's
// stack for a request in flight past 15 s).
const MaxFaultDelay = time.Minute

// Fault makes the next Count storage requests for a bucket (of one operation when Op is
// set) misbehave as a real backend does, so tests see a client's retries, timeouts and
// errors without cutting the machine's network: wait DelayMS first (a slow backend), then
// answer Status (a 429 or 5xx that a GCS client retries), or Drop the connection without an
// answer (a cut network, a front end that died), or DropAfter: serve the request (an upload
// is stored) and cut the connection instead of answering (a front end that died after the
// backend took it: the client cannot tell it from Drop); or, with none, answer normally late.
// The body of an upload has been read when the fault strikes (the emulator reads it first),
// so a dropped upload is one the client sent whole and never heard of.
type Fault struct {
	Status    int    `json:"status,omitempty"`
	Count     int    `json:"count"`
	Op        string `json:"op,omitempty"`
	DelayMS   int    `json:"delayMs,omitempty"`
	Drop      bool   `json:"drop,omitempty"`
	DropAfter bool   `json:"dropAfter,omitempty"`
}

// faultKey: a bucket's faults, one per operation ("" for any).
type faultKey struct{ bucket, op string }

// SetFault arms f for bucket: the next f.Count requests of f.Op ("" any) misbehave. A nil f
// disarms every fault of the bucket, a Count of 0 the one of f.Op. A fault of an operation
// strikes before the bucket's fault for any.
func (l *Layer) SetFault(bucket string, f *Fault) error {
	if bucket == "" {
		return fmt.Errorf("a fault needs a bucket")
	}
	if f != nil && f.Count < 0 {
		return fmt.Errorf("fault count %d: want 0 (disarm) or more", f.Count)
	}
	if f != nil && f.Count > 0 {
		if err := f.check(); err != nil {
			return err
		}
	}
	if f != nil && f.Op != "" && !slices.Contains(Ops, f.Op) {
		return fmt.Errorf("fault op %q: want one of %s, or none for every request", f.Op, strings.Join(Ops, ", "))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case f == nil:
		for k := range l.faults {
			if k.bucket == bucket {
				delete(l.faults, k)
			}
		}
	case f.Count <= 0:
		delete(l.faults, faultKey{bucket, f.Op})
	default:
		if l.faults == nil {
			l.faults = map[faultKey]*Fault{}
		}
		c := *f
		l.faults[faultKey{bucket, f.Op}] = &c
	}
	return nil
}

// check refuses a fault that would not misbehave, or not as a GCS backend can.
func (f *Fault) check() error {
	switch {
	case f.Status != 0 && f.Status != http.StatusTooManyRequests && (f.Status < 500 || f.Status > 599):
		return fmt.Errorf("fault status %d: want 429 or 5xx", f.Status)
	case f.Status != 0 && (f.Drop || f.DropAfter):
		return fmt.Errorf("fault status %d and a drop: a dropped connection has no answer", f.Status)
	case f.Drop && f.DropAfter:
		return fmt.Errorf("fault drop and dropAfter: the request is cut before storage or after, not both")
	case f.DelayMS < 0 || time.Duration(f.DelayMS)*time.Millisecond > MaxFaultDelay:
		return fmt.Errorf("fault delay %d ms: want 0 to %d", f.DelayMS, MaxFaultDelay.Milliseconds())
	case f.Status == 0 && !f.Drop && !f.DropAfter && f.DelayMS == 0:
		return fmt.Errorf("fault of %d requests that does nothing: give a status, a delay, drop or dropAfter", f.Count)
	}
	return nil
}

// FaultsLeft says how many requests of each operation ("any" for the bucket's fault of every
// request) the bucket's faults have still to strike: a test checks its fault was met.
func (l *Layer) FaultsLeft(bucket string) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	left := map[string]int{}
	for k, f := range l.faults {
		if k.bucket == bucket {
			op := k.op
			if op == "" {
				op = "any"
			}
			left[op] = f.Count
		}
	}
	return left
}

// takeFault returns the fault the request of op for bucket meets, if any, and counts it.
func (l *Layer) takeFault(bucket, op string) (Fault, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range []faultKey{{bucket, op}, {bucket, ""}} {
		f := l.faults[k]
		if f == nil {
			continue
		}
		if f.Count--; f.Count <= 0 {
			delete(l.faults, k)
		}
		return *f, true
	}
	return Fault{}, false
}

// serveFault plays the fault the request meets, if any, and says whether the request goes
// on to storage (false: it has been answered, dropped, or its client went away).
func (l *Layer) serveFault(w http.ResponseWriter, r *http.Request, bucket string) bool {
	op := opOf(r)
	f, ok := l.takeFault(bucket, op)
	if !ok {
		return true
	}
	l.cfg.Log.Info("storage request misbehaves on purpose", "bucket", bucket, "op", op, "method", r.Method,
		"status", f.Status, "delayMs", f.DelayMS, "drop", f.Drop, "dropAfter", f.DropAfter)
	if f.DelayMS > 0 {
		t := time.NewTimer(time.Duration(f.DelayMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return false
		}
	}
	switch {
	case f.DropAfter:
		l.storage.ServeHTTP(&unanswered{header: http.Header{}}, r)
		fallthrough
	case f.Drop:
		// net/http closes the HTTP/1 connection without an answer and without logging a
		// stack (the emulator serves HTTP/1 only): the client sees the connection cut.
		panic(http.ErrAbortHandler)
	case f.Status != 0:
		gcsError(w, f.Status, fmt.Sprintf("fault injected for bucket %s (%s)", bucket, op))
		return false
	}
	return true
}

// opOf classifies a storage request of the JSON API (/storage/v1/b/B..., /upload/...,
// /download/...) or the XML API (/B/OBJECT) by what it does to the bucket.
func opOf(r *http.Request) string {
	segs := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
	switch {
	case len(segs) >= 1 && segs[0] == "upload":
		return OpWrite
	case len(segs) >= 1 && segs[0] == "download":
		return OpRead
	case len(segs) >= 3 && segs[0] == "storage" && segs[1] == "v1" && segs[2] == "b":
		// storage/v1/b/B[/o[/OBJECT[/ACTION...]]], or B's iam, acl, storageLayout...
		switch n := len(segs); {
		case n <= 4 && r.Method == http.MethodDelete:
			return OpDelete // the bucket
		case n <= 4 || segs[4] != "o":
			return OpMetadata // the bucket's, or its policies and layout
		case n == 5:
			if r.Method == http.MethodGet {
				return OpList
			}
			return OpWrite // an insert without the upload path
		case n > 6:
			if r.Method == http.MethodPost {
				return OpWrite // compose, copyTo, rewriteTo, moveTo
			}
			return OpMetadata // an object's acl
		}
		switch r.Method {
		case http.MethodGet:
			if r.URL.Query().Get("alt") == "media" {
				return OpRead
			}
			return OpMetadata
		case http.MethodDelete:
			return OpDelete
		}
		return OpMetadata // PATCH, PUT: an object's metadata
	}
	// The XML API: /BUCKET lists, /BUCKET/OBJECT reads, writes, deletes or heads.
	if len(segs) == 1 {
		if r.Method == http.MethodGet {
			return OpList
		}
		return OpMetadata
	}
	switch r.Method {
	case http.MethodGet:
		return OpRead
	case http.MethodPut, http.MethodPost:
		return OpWrite
	case http.MethodDelete:
		return OpDelete
	}
	return OpMetadata
}

// unanswered is where a DropAfter request's answer goes: nowhere.
type unanswered struct{ header http.Header }

func (u *unanswered) Header() http.Header         { return u.header }
func (u *unanswered) Write(b []byte) (int, error) { return len(b), nil }
func (u *unanswered) WriteHeader(int)             {}
