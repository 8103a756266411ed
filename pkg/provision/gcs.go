package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// DefaultEndpoint is Google Cloud Storage's JSON API.
const DefaultEndpoint = "https://storage.googleapis.com/storage/v1/"

const (
	// callTimeout bounds one JSON API call.
	callTimeout = 30 * time.Second
	// listPageSize is the objects listed per page when a directory is deleted.
	listPageSize = 1000
	// maxListPages bounds one DeleteDir call's listing (10 million objects); a bigger
	// directory is finished by the next call, since what was deleted stays deleted.
	maxListPages = 10000
	// deleteWorkers is how many object deletions run at once: a directory of 100,000 small
	// objects goes in minutes, not an hour of one-at-a-time round trips.
	deleteWorkers = 16
	// maxErrorBody bounds what of an error response is read and quoted.
	maxErrorBody = 4 << 10
)

// ErrBucketNotFound is a bucket that does not exist.
var ErrBucketNotFound = errors.New("bucket not found")

// ErrForbidden is a call the provisioner's identity may not make.
var ErrForbidden = errors.New("permission denied")

// GCS is the few calls of Cloud Storage's JSON API the provisioner makes. Its http.Client
// carries the identity (Application Default Credentials, or none for an emulator).
type GCS struct {
	endpoint string // .../storage/v1/
	upload   string // .../upload/storage/v1/
	client   *http.Client
}

// NewGCS returns the client of the JSON API at endpoint ("" for DefaultEndpoint; an
// emulator's http://host:port/storage/v1/).
func NewGCS(endpoint string, client *http.Client) (*GCS, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/storage/v1") {
		return nil, fmt.Errorf("GCS endpoint %q: want http(s)://host[:port]/storage/v1/", endpoint)
	}
	if client == nil {
		return nil, errors.New("GCS client: no http.Client")
	}
	base := strings.TrimSuffix(endpoint, "/") + "/"
	root := strings.TrimSuffix(base, "storage/v1/")
	return &GCS{endpoint: base, upload: root + "upload/storage/v1/", client: client}, nil
}

// CheckBucket returns nil when the bucket exists and the identity may read it.
func (g *GCS) CheckBucket(ctx context.Context, bucket string) error {
	code, body, err := g.do(ctx, http.MethodGet, g.endpoint+"b/"+url.PathEscape(bucket)+"?fields=name", nil, "")
	if err != nil {
		return err
	}
	return statusError(code, body, "get bucket "+bucket)
}

// CreateDir makes the directory object dir/ (empty) unless it exists: the claim's
// directory shows in listings before anything is written to it, and making it proves the
// identity may write the bucket.
func (g *GCS) CreateDir(ctx context.Context, bucket, dir string) error {
	q := url.Values{"uploadType": {"media"}, "name": {dir + "/"}, "ifGenerationMatch": {"0"}}
	code, body, err := g.do(ctx, http.MethodPost, g.upload+"b/"+url.PathEscape(bucket)+"/o?"+q.Encode(), []byte{}, "application/octet-stream")
	if err != nil {
		return err
	}
	if code == http.StatusPreconditionFailed {
		return nil // there already: a retried Provision
	}
	return statusError(code, body, "create gs://"+bucket+"/"+dir+"/")
}

// DeleteDir deletes every object under dir/ (and dir/ itself) and returns how many it
// deleted. A bucket already gone deletes nothing and is not an error.
func (g *GCS) DeleteDir(ctx context.Context, bucket, dir string) (int, error) {
	prefix := dir + "/"
	deleted := 0
	for range maxListPages {
		// Always the first page: the objects deleted are gone from the next listing, so no
		// page token is needed and a failed deletion is listed again by the next call.
		q := url.Values{"prefix": {prefix}, "maxResults": {fmt.Sprint(listPageSize)}, "fields": {"items(name),nextPageToken"}}
		code, body, err := g.do(ctx, http.MethodGet, g.endpoint+"b/"+url.PathEscape(bucket)+"/o?"+q.Encode(), nil, "")
		if err != nil {
			return deleted, err
		}
		if code == http.StatusNotFound {
			return deleted, nil
		}
		if err := statusError(code, body, "list gs://"+bucket+"/"+prefix); err != nil {
			return deleted, err
		}
		var page struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return deleted, fmt.Errorf("list gs://%s/%s: %w", bucket, prefix, err)
		}
		if len(page.Items) == 0 {
			return deleted, nil
		}
		names := make([]string, 0, len(page.Items))
		for _, it := range page.Items {
			if strings.HasPrefix(it.Name, prefix) { // never anything outside the directory
				names = append(names, it.Name)
			}
		}
		if len(names) == 0 {
			return deleted, fmt.Errorf("list gs://%s/%s: the endpoint answered objects outside the prefix", bucket, prefix)
		}
		n, err := g.deleteObjects(ctx, bucket, names)
		deleted += n
		if err != nil {
			return deleted, err
		}
	}
	return deleted, fmt.Errorf("gs://%s/%s: more than %d pages of objects; the rest is deleted on the next try", bucket, prefix, maxListPages)
}

// deleteObjects deletes names with deleteWorkers at once and returns how many it deleted;
// an object already gone is no error. It returns the first error, after every worker
// stopped.
func (g *GCS) deleteObjects(ctx context.Context, bucket string, names []string) (int, error) {
	var (
		mu       sync.Mutex
		deleted  int
		firstErr error
		wg       sync.WaitGroup
	)
	work := make(chan string)
	for range min(deleteWorkers, len(names)) {
		wg.Go(func() {
			for name := range work {
				code, body, err := g.do(ctx, http.MethodDelete, g.endpoint+"b/"+url.PathEscape(bucket)+"/o/"+url.PathEscape(name), nil, "")
				if err == nil && code != http.StatusNotFound {
					err = statusError(code, body, "delete gs://"+bucket+"/"+name)
				}
				mu.Lock()
				switch {
				case err != nil && firstErr == nil:
					firstErr = err
				case err == nil && code != http.StatusNotFound:
					deleted++
				}
				mu.Unlock()
			}
		})
	}
	for _, n := range names {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		work <- n
	}
	close(work)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return deleted, firstErr
}

// do makes one call, bounded by callTimeout, and returns the status and (bounded) body.
func (g *GCS) do(ctx context.Context, method, u string, body []byte, contentType string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, redact(u), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// redact drops the query of a URL for an error message.
func redact(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i]
	}
	return u
}

// statusError turns a JSON API answer into nil (2xx) or an error wrapping ErrBucketNotFound
// or ErrForbidden, with the API's own message.
func statusError(code int, body []byte, what string) error {
	if code >= 200 && code < 300 {
		return nil
	}
	msg := apiMessage(body)
	switch code {
	case http.StatusNotFound:
		return fmt.Errorf("%s: %w (HTTP 404: %s)", what, ErrBucketNotFound, msg)
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%s: %w (HTTP %d: %s)", what, ErrForbidden, code, msg)
	}
	return fmt.Errorf("%s: HTTP %d: %s", what, code, msg)
}

// apiMessage is the message of a JSON API error body, or the start of the body.
func apiMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	if len(body) > maxErrorBody {
		body = body[:maxErrorBody]
	}
	return strings.TrimSpace(string(body))
}
