package emulatorauth

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// admin sends an admin call and returns its status and body.
func (e *env) admin(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+"/_admin/"+path, strings.NewReader(body))
	req.Header.Set("X-Test-Admin", "yes")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// fresh sends a request on a connection of its own (Go's client retries some requests cut
// on a reused connection, which would hide a drop) and returns its status or error.
func (e *env) fresh(ctx context.Context, method, path string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, method, e.srv.URL+path, nil)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestOpOf: each request gcsfuse and the Go client send is the operation a user would name.
func TestOpOf(t *testing.T) {
	for _, c := range []struct{ method, path, want string }{
		{"POST", "/upload/storage/v1/b/b/o?uploadType=multipart", OpWrite},
		{"PUT", "/upload/storage/v1/b/b/o?uploadType=resumable&upload_id=x", OpWrite},
		{"GET", "/download/storage/v1/b/b/o/a%2Fb?alt=media", OpRead},
		{"GET", "/storage/v1/b/b/o/a%2Fb?alt=media", OpRead},
		{"GET", "/storage/v1/b/b/o/a%2Fb", OpMetadata},
		{"PATCH", "/storage/v1/b/b/o/a", OpMetadata},
		{"DELETE", "/storage/v1/b/b/o/a", OpDelete},
		{"GET", "/storage/v1/b/b/o?prefix=d/&delimiter=/", OpList},
		{"GET", "/storage/v1/b/b", OpMetadata},
		{"DELETE", "/storage/v1/b/b", OpDelete},
		{"GET", "/storage/v1/b/b/iam", OpMetadata},
		{"GET", "/storage/v1/b/b/storageLayout", OpMetadata},
		{"GET", "/storage/v1/b/b/o/a/acl/user-x", OpMetadata},
		{"POST", "/storage/v1/b/b/o/dst/compose", OpWrite},
		{"POST", "/storage/v1/b/b/o/src/moveTo/o/dst", OpWrite},
		{"POST", "/storage/v1/b/b/o/src/rewriteTo/b/c/o/dst", OpWrite},
		{"GET", "/b/dir/obj", OpRead},
		{"HEAD", "/b/obj", OpMetadata},
		{"PUT", "/b/obj", OpWrite},
		{"DELETE", "/b/obj", OpDelete},
		{"GET", "/b", OpList},
	} {
		if got := opOf(httptest.NewRequest(c.method, c.path, nil)); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.path, got, c.want)
		}
	}
}

// TestFaultOfAnOperation: a fault of one operation strikes that operation's requests only,
// before the bucket's fault of every request, and GET faults/BUCKET says what is left.
func TestFaultOfAnOperation(t *testing.T) {
	e := newEnv(t)
	if code, body := e.admin(t, "PUT", "faults/b", `{"op":"write","status":503,"count":2}`); code != 200 {
		t.Fatalf("set: %d %s", code, body)
	}
	if code, body := e.admin(t, "PUT", "faults/b", `{"status":429,"count":1}`); code != 200 {
		t.Fatalf("set: %d %s", code, body)
	}
	var got []int
	for _, r := range []struct{ method, path string }{
		{"POST", "/upload/storage/v1/b/b/o?uploadType=media&name=x"}, // write: 503
		{"GET", "/storage/v1/b/b/o/x?alt=media"},                     // read: the bucket's 429
		{"GET", "/storage/v1/b/b/o/x?alt=media"},                     // read: served
		{"POST", "/upload/storage/v1/b/b/o?uploadType=media&name=x"}, // write: 503
		{"POST", "/upload/storage/v1/b/b/o?uploadType=media&name=x"}, // write: served
	} {
		code, _ := e.do(t, r.method, r.path, "")
		got = append(got, code)
	}
	if want := []int{503, 429, 200, 503, 200}; !slices.Equal(got, want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	if _, body := e.admin(t, "GET", "faults/b", ""); strings.TrimSpace(body) != "{}" {
		t.Fatalf("faults left %s, want none", body)
	}
	e.admin(t, "PUT", "faults/b", `{"op":"list","status":500,"count":3}`)
	code, body := e.admin(t, "GET", "faults/b", "")
	var left map[string]int
	if err := json.Unmarshal([]byte(body), &left); code != 200 || err != nil || left["list"] != 3 || len(left) != 1 {
		t.Fatalf("faults left: %d %s %v, want list: 3", code, body, err)
	}
	e.admin(t, "PUT", "faults/b", `{"op":"list","count":0}`)
	if _, body := e.admin(t, "GET", "faults/b", ""); strings.TrimSpace(body) != "{}" {
		t.Fatalf("a count of 0 left %s", body)
	}
}

// TestFaultDropsTheConnection: a dropped request gets no answer at all, and storage never
// sees it; the next one is served.
func TestFaultDropsTheConnection(t *testing.T) {
	e := newEnv(t)
	e.admin(t, "PUT", "faults/b", `{"op":"read","drop":true,"count":1}`)
	code, err := e.fresh(context.Background(), "GET", "/b/obj")
	if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "EOF")) {
		t.Fatalf("dropped request: status %d, error %v; want the connection cut", code, err)
	}
	if slices.Contains(e.storage(), "GET /b/obj") {
		t.Fatal("storage served a dropped request")
	}
	if code, err := e.fresh(context.Background(), "GET", "/b/obj"); err != nil || code != 200 {
		t.Fatalf("after the drop: %d %v", code, err)
	}
}

// TestFaultDelays: a delayed request is answered no sooner than its delay, by storage when
// the fault has no status; a client that gives up first leaves storage untouched.
func TestFaultDelays(t *testing.T) {
	e := newEnv(t)
	const delay = 300 * time.Millisecond
	e.admin(t, "PUT", "faults/b", `{"op":"metadata","delayMs":300,"count":1}`)
	start := time.Now()
	code, err := e.fresh(context.Background(), "GET", "/storage/v1/b/b/o/x")
	if took := time.Since(start); err != nil || code != 200 || took < delay {
		t.Fatalf("delayed request: %d %v after %v, want 200 after at least %v", code, err, took, delay)
	}
	e.admin(t, "PUT", "faults/b", `{"op":"metadata","delayMs":60000,"status":503,"count":1}`)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := e.fresh(ctx, "HEAD", "/b/y"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 30*time.Second {
		t.Fatalf("a client that gave up: %v after %v", err, time.Since(start))
	}
	if seen := e.storage(); len(seen) != 1 {
		t.Fatalf("storage saw %v, want only the first request", seen)
	}
}

// TestFaultRefused: a fault that does nothing, or nothing a backend does, is refused with why.
func TestFaultRefused(t *testing.T) {
	e := newEnv(t)
	for body, want := range map[string]string{
		`{"status":404,"count":1}`:                  "want 429 or 5xx",
		`{"status":503,"drop":true,"count":1}`:      "no answer",
		`{"count":1}`:                               "does nothing",
		`{"delayMs":-1,"count":1}`:                  "fault delay",
		`{"delayMs":60001,"count":1}`:               "fault delay",
		`{"status":503,"count":-1}`:                 "fault count -1",
		`{"status":503,"dropAfter":true,"count":1}`: "no answer",
		`{"drop":true,"dropAfter":true,"count":1}`:  "not both",
		`{"op":"write","delay":4000,"count":1}`:     "unknown field",
		`{"op":"rename","status":503,"count":1}`:    "want one of read, write",
	} {
		if code, got := e.admin(t, "PUT", "faults/b", body); code != 400 || !strings.Contains(got, want) {
			t.Errorf("%s: %d %q, want 400 saying %q", body, code, got, want)
		}
	}
	if _, body := e.admin(t, "GET", "faults/b", ""); strings.TrimSpace(body) != "{}" {
		t.Fatalf("a refused fault was armed: %s", body)
	}
}

// TestFaultDropsTheAnswer: dropAfter serves the request (storage sees it: an upload is
// stored) and cuts the connection instead of answering; DELETE disarms every fault of the
// bucket.
func TestFaultDropsTheAnswer(t *testing.T) {
	e := newEnv(t)
	e.admin(t, "PUT", "faults/b", `{"op":"write","dropAfter":true,"count":1}`)
	if code, err := e.fresh(context.Background(), "POST", "/upload/storage/v1/b/b/o?uploadType=media&name=x"); err == nil {
		t.Fatalf("a request whose answer was dropped got %d", code)
	}
	if !slices.Contains(e.storage(), "POST /upload/storage/v1/b/b/o") {
		t.Fatalf("storage did not serve the request whose answer was dropped: %v", e.storage())
	}
	e.admin(t, "PUT", "faults/b", `{"op":"read","drop":true,"count":5}`)
	e.admin(t, "PUT", "faults/b", `{"status":503,"count":5}`)
	if code, body := e.admin(t, "DELETE", "faults/b", ""); code != 200 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if _, body := e.admin(t, "GET", "faults/b", ""); strings.TrimSpace(body) != "{}" {
		t.Fatalf("faults left after DELETE: %s", body)
	}
	if err := e.layer.SetFault("", &Fault{Status: 503, Count: 1}); err == nil {
		t.Fatal("a fault of no bucket was armed")
	}
}
