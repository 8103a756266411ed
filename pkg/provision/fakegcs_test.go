package provision

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeGCS serves the four calls of the JSON API that GCS makes (bucket get, media upload with
// ifGenerationMatch=0, prefix listing, object delete) over a map, so that the provisioner's
// unit tests need no emulator. The proof against a real emulator is e2e's
// TestDynamicProvisioning (test/e2e/provisioning_test.go).
type fakeGCS struct {
	Endpoint string // .../storage/v1/

	mu      sync.Mutex
	buckets map[string]map[string]bool // bucket -> object names
}

// startFake serves the named buckets, empty, until the test ends.
func startFake(t *testing.T, buckets ...string) *fakeGCS {
	t.Helper()
	f := &fakeGCS{buckets: map[string]map[string]bool{}}
	for _, b := range buckets {
		f.buckets[b] = map[string]bool{}
	}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.Endpoint = srv.URL + "/storage/v1/"
	return f
}

// put adds an object to an existing bucket.
func (f *fakeGCS) put(bucket, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buckets[bucket][name] = true
}

// names lists a bucket's objects, sorted.
func (f *fakeGCS) names(bucket string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sortedLocked(bucket)
}

func (f *fakeGCS) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	upload := strings.HasPrefix(r.URL.Path, "/upload/storage/v1/b/")
	rest, ok := strings.CutPrefix(strings.TrimPrefix(r.URL.EscapedPath(), "/upload"), "/storage/v1/b/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	escBucket, escObject, hasObjects := strings.Cut(rest, "/o")
	bucket, _ := url.PathUnescape(escBucket)
	objects, exists := f.buckets[bucket]
	if !exists {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":404,"message":"bucket not found"}}`))
		return
	}
	q := r.URL.Query()
	switch {
	case !hasObjects && r.Method == http.MethodGet:
		_ = json.NewEncoder(w).Encode(map[string]string{"name": bucket})
	case upload && r.Method == http.MethodPost:
		name := q.Get("name")
		if objects[name] && q.Get("ifGenerationMatch") == "0" {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		objects[name] = true
		_ = json.NewEncoder(w).Encode(map[string]string{"name": name})
	case escObject == "" && r.Method == http.MethodGet:
		limit, err := strconv.Atoi(q.Get("maxResults"))
		if err != nil || limit <= 0 {
			limit = 1000
		}
		type item struct {
			Name string `json:"name"`
		}
		var items []item
		for _, n := range f.sortedLocked(bucket) {
			if strings.HasPrefix(n, q.Get("prefix")) && len(items) < limit {
				items = append(items, item{n})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string][]item{"items": items})
	case strings.HasPrefix(escObject, "/") && r.Method == http.MethodDelete:
		name, _ := url.PathUnescape(escObject[1:])
		if !objects[name] {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		delete(objects, name)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "not served by the fake: "+r.Method+" "+r.URL.String(), http.StatusNotImplemented)
	}
}

func (f *fakeGCS) sortedLocked(bucket string) []string {
	var names []string
	for n := range f.buckets[bucket] {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
