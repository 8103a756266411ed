package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
)

// movePath is the JSON API's objects.move: POST [/storage/v1]/b/BUCKET/o/SRC/moveTo/o/DST,
// the object names escaped (a "/" in them is %2F, so neither holds a raw slash).
var movePath = regexp.MustCompile(`^(/storage/v1)?/b/([^/]+)/o/([^/]+)/moveTo/o/([^/]+)$`)

// withMove serves objects.move in front of fake-gcs-server, which has no such route (up to
// v1.56.1, its latest): its router takes the request for an object update and answers 400
// "Metadata in the request couldn't decode". gcsfuse 3 renames every file with it (its
// enable-atomic-rename-object is on by default, and the driver refuses that hidden flag), so
// without it every rename through a mount failed with EIO: 29 of the 29 failures of
// gcsfuse's own integration tests here (test/gcsfuse-itests; some after a failed rename
// panicked a test binary), which all pass with it.
//
// A move is the source's checks, a copy of the checked generation (copyTo), then a delete of
// that generation, each through fake-gcs-server itself: not atomic (for a moment both names
// exist), which no client of an emulator can tell from a slow GCS. Preconditions: the
// source's ifSource(Meta)Generation(Not)Match and the destination's if(Meta)Generation(Not)Match
// (ifGenerationMatch=0: it must not exist), answered 412 as GCS does.
func withMove(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := movePath.FindStringSubmatch(r.URL.EscapedPath())
		if r.Method != http.MethodPost || m == nil {
			next.ServeHTTP(w, r)
			return
		}
		move(next, w, r, m[1], m[2], m[3], m[4])
	})
}

// objectMeta is what a move checks of an object.
type objectMeta struct {
	Generation     string `json:"generation"`
	Metageneration string `json:"metageneration"`
}

func move(next http.Handler, w http.ResponseWriter, r *http.Request, prefix, bucket, src, dst string) {
	q := r.URL.Query()
	objURL := func(obj string) string { return prefix + "/b/" + bucket + "/o/" + obj }
	srcRes := inner(next, r, http.MethodGet, objURL(src), nil)
	if srcRes.Code != http.StatusOK {
		relay(w, srcRes)
		return
	}
	var s objectMeta
	if err := json.Unmarshal(srcRes.Body.Bytes(), &s); err != nil {
		jsonError(w, http.StatusInternalServerError, "move: reading the source's metadata: "+err.Error())
		return
	}
	if msg := checkConds(q, "ifSource", &s); msg != "" {
		jsonError(w, http.StatusPreconditionFailed, "move: source: "+msg)
		return
	}
	if hasConds(q, "if") {
		var d *objectMeta
		switch dstRes := inner(next, r, http.MethodGet, objURL(dst), nil); dstRes.Code {
		case http.StatusOK:
			d = &objectMeta{}
			if err := json.Unmarshal(dstRes.Body.Bytes(), d); err != nil {
				jsonError(w, http.StatusInternalServerError, "move: reading the destination's metadata: "+err.Error())
				return
			}
		case http.StatusNotFound:
		default:
			relay(w, dstRes)
			return
		}
		if msg := checkConds(q, "if", d); msg != "" {
			jsonError(w, http.StatusPreconditionFailed, "move: destination: "+msg)
			return
		}
	}
	copyRes := inner(next, r, http.MethodPost, objURL(src)+"/copyTo/b/"+bucket+"/o/"+dst, url.Values{"sourceGeneration": {s.Generation}})
	if copyRes.Code != http.StatusOK {
		relay(w, copyRes)
		return
	}
	delRes := inner(next, r, http.MethodDelete, objURL(src), url.Values{"generation": {s.Generation}})
	if delRes.Code/100 != 2 && delRes.Code != http.StatusNotFound {
		relay(w, delRes)
		return
	}
	relay(w, copyRes) // the destination object, as objects.move answers
}

// inner sends a request to fake-gcs-server on behalf of r (same host and headers: its
// routes look at the host) and returns the answer.
func inner(next http.Handler, r *http.Request, method, escapedPath string, query url.Values) *httptest.ResponseRecorder {
	u := *r.URL
	u.Path, u.RawPath, u.RawQuery = "", escapedPath, query.Encode()
	if p, err := url.PathUnescape(escapedPath); err == nil {
		u.Path = p
	}
	req := r.Clone(r.Context())
	req.Method, req.URL, req.RequestURI, req.Body, req.ContentLength = method, &u, u.RequestURI(), http.NoBody, 0
	req.Header = r.Header.Clone()
	req.Header.Del("Content-Type")
	req.Header.Del("Content-Length")
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, req)
	return rec
}

func relay(w http.ResponseWriter, res *httptest.ResponseRecorder) {
	for k, v := range res.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(res.Code)
	_, _ = w.Write(res.Body.Bytes())
}

// jsonError answers as the JSON API does.
func jsonError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	reason := "invalid"
	if code == http.StatusPreconditionFailed {
		reason = "conditionNotMet"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": code, "message": msg, "errors": []map[string]string{{"reason": reason, "message": msg}},
	}})
}

// hasConds reports whether the query has any precondition of the prefix ("if": the
// destination's, "ifSource": the source's).
func hasConds(q url.Values, prefix string) bool {
	for _, c := range []string{"GenerationMatch", "GenerationNotMatch", "MetagenerationMatch", "MetagenerationNotMatch"} {
		if q.Has(prefix + c) {
			return true
		}
	}
	return false
}

// checkConds checks the preconditions of the prefix against o (nil: the object does not
// exist, whose generation is 0) and says which failed ("" if none).
func checkConds(q url.Values, prefix string, o *objectMeta) string {
	gen, meta, exists := int64(0), int64(0), o != nil
	if exists {
		gen, _ = strconv.ParseInt(o.Generation, 10, 64)
		meta, _ = strconv.ParseInt(o.Metageneration, 10, 64)
	}
	for _, c := range []struct {
		name  string
		value int64
		match bool
		meta  bool
	}{
		{"GenerationMatch", gen, true, false}, {"GenerationNotMatch", gen, false, false},
		{"MetagenerationMatch", meta, true, true}, {"MetagenerationNotMatch", meta, false, true},
	} {
		v := q.Get(prefix + c.name)
		if v == "" {
			continue
		}
		want, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Sprintf("%s%s=%q is not a number", prefix, c.name, v)
		}
		if c.meta && !exists {
			return fmt.Sprintf("%s%s=%d: no such object", prefix, c.name, want)
		}
		if (c.value == want) != c.match {
			return fmt.Sprintf("%s%s=%d, the object's is %d", prefix, c.name, want, c.value)
		}
	}
	return ""
}
