package emulator

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func do(t *testing.T, method, u, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func generation(t *testing.T, body string) string {
	t.Helper()
	var o struct{ Generation, Name string }
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return o.Generation
}

// objects.move as gcsfuse sends it (names escaped, preconditions on both ends): the
// destination gets the content, the source is gone, a failed precondition is a 412 that
// changes nothing, a missing source a 404.
func TestMove(t *testing.T) {
	s, err := Start("127.0.0.1", 0, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	api := s.Endpoint + "b/b/o/"
	put := func(name, content string) string {
		code, body := do(t, http.MethodPost, s.URL+"/upload/storage/v1/b/b/o?uploadType=media&name="+url.QueryEscape(name), content)
		if code != http.StatusOK {
			t.Fatalf("upload %s: %d %s", name, code, body)
		}
		return generation(t, body)
	}
	get := func(name string) (int, string) {
		return do(t, http.MethodGet, s.URL+"/download/storage/v1/b/b/o/"+url.PathEscape(name)+"?alt=media", "")
	}
	moveURL := func(src, dst, query string) string {
		return api + url.PathEscape(src) + "/moveTo/o/" + url.PathEscape(dst) + "?" + query
	}

	gen := put("dir/a.txt", "hello")
	code, body := do(t, http.MethodPost, moveURL("dir/a.txt", "dir/b.txt", "ifSourceGenerationMatch="+gen+"&ifGenerationMatch=0"), "")
	if code != http.StatusOK {
		t.Fatalf("move: %d %s", code, body)
	}
	var moved struct{ Name, Bucket string }
	if err := json.Unmarshal([]byte(body), &moved); err != nil || moved.Name != "dir/b.txt" || moved.Bucket != "b" {
		t.Errorf("move answered %s (%v), want the destination object", body, err)
	}
	if code, content := get("dir/b.txt"); code != http.StatusOK || content != "hello" {
		t.Errorf("destination: %d %q", code, content)
	}
	if code, _ := get("dir/a.txt"); code != http.StatusNotFound {
		t.Errorf("source after the move: %d, want 404", code)
	}

	// Preconditions: a stale source generation, an existing destination with
	// ifGenerationMatch=0. Nothing moves.
	genC := put("c.txt", "c")
	put("d.txt", "d")
	for _, q := range []string{"ifSourceGenerationMatch=1", "ifSourceGenerationNotMatch=" + genC, "ifGenerationMatch=0", "ifSourceMetagenerationMatch=7"} {
		code, body := do(t, http.MethodPost, moveURL("c.txt", "d.txt", q), "")
		if code != http.StatusPreconditionFailed || !strings.Contains(body, "conditionNotMet") {
			t.Errorf("%s: %d %s, want 412 conditionNotMet", q, code, body)
		}
	}
	if code, content := get("c.txt"); code != http.StatusOK || content != "c" {
		t.Errorf("source after refused moves: %d %q", code, content)
	}
	if code, content := get("d.txt"); code != http.StatusOK || content != "d" {
		t.Errorf("destination after refused moves: %d %q", code, content)
	}
	// Over an existing destination without a precondition: replaced.
	if code, body := do(t, http.MethodPost, moveURL("c.txt", "d.txt", ""), ""); code != http.StatusOK {
		t.Errorf("move over d.txt: %d %s", code, body)
	}
	if code, content := get("d.txt"); code != http.StatusOK || content != "c" {
		t.Errorf("d.txt after the move over it: %d %q", code, content)
	}

	if code, _ := do(t, http.MethodPost, moveURL("missing", "x", ""), ""); code != http.StatusNotFound {
		t.Errorf("moving a missing object: %d, want 404", code)
	}
	// Everything else still goes to fake-gcs-server.
	if code, _ := do(t, http.MethodGet, api+url.PathEscape("d.txt"), ""); code != http.StatusOK {
		t.Errorf("objects.get: %d", code)
	}
}
