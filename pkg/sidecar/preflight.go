package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/auth"
	authcreds "cloud.google.com/go/auth/credentials"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/backoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/lazyre"
)

const (
	// preflightTimeout bounds one attempt of the bucket check, an access token included.
	preflightTimeout = 10 * time.Second
	// preflightBudget bounds the whole check, its retries included: no attempt starts after
	// it. gcsfuse retries a slow or failing GCS on its own; without retries here, one stalled
	// answer failed a volume for good (in shared mode every pod bound to its mount).
	preflightBudget = 30 * time.Second
	// preflightFirstRetry is the wait after the first transient failure, doubled after each
	// one up to preflightMaxRetry.
	preflightFirstRetry = time.Second
	// preflightMaxRetry is the longest wait between two attempts.
	preflightMaxRetry = 8 * time.Second
	// minRetryWait keeps a policy without a first wait from spinning.
	minRetryWait = 10 * time.Millisecond
	// storageScope is the scope gcsfuse asks its credentials for.
	storageScope = "https://www.googleapis.com/auth/devstorage.full_control"
	// maxReason bounds what a refusal's text adds to a message.
	maxReason = 300
)

// checkBucket asks a custom (emulator) endpoint whether the bucket exists and whether the
// volume's identity may read it. gcsfuse skips that check when --custom-endpoint is set and
// then mounts a missing or forbidden bucket as an empty directory whose every access fails
// (writes only at close), so an app would run to the end and lose its output. Against
// Google Cloud Storage gcsfuse checks the bucket itself at mount time.
//
// With keyFile, the request carries an access token got from that file by the library
// gcsfuse itself reads --key-file with (cloud.google.com/go/auth, credentials.DetectDefault),
// so a credential the token endpoint refuses fails the volume here, naming the identity.
// Both requests go r's way (gcsfuse's proxy and CAs).
//
// It is one attempt, bounded by timeout; a failure a later attempt may not see (the endpoint
// slow or unreachable, 429 or a 5xx) is a transientError (checkBucketRetrying).
func checkBucket(ctx context.Context, timeout time.Duration, r *route, endpoint, bucket, keyFile, identity string) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := strings.TrimSuffix(endpoint, "/") + "/b/" + url.PathEscape(bucket)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("bucket check: %w", err)
	}
	who := "anonymous access"
	if keyFile != "" {
		who = identity
		creds, err := credentialsFrom(keyFile, r.client)
		if err != nil {
			return fmt.Errorf("bucket %q: the credentials of %s cannot be used: %s", bucket, who, clip(err.Error()))
		}
		tok, err := creds.Token(ctx)
		if err != nil {
			if parent.Err() == nil && (tokenEndpointBusy(err) || transientNetError(err)) {
				return transientError{fmt.Errorf("bucket %q: %s got no access token: %s", bucket, who, clip(r.proxy.Scrub(err.Error())))}
			}
			return fmt.Errorf("bucket %q: %s was refused an access token: %s", bucket, who, clip(r.proxy.Scrub(err.Error())))
		}
		req.Header.Set("Authorization", "Bearer "+tok.Value)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		// A proxy that refuses a CONNECT makes Go's error its bare status text ("Forbidden"):
		// the message names the proxy (redacted) so that the cause is plain.
		failed := fmt.Errorf("bucket %q: storage endpoint unreachable%s: %s", bucket, r.via(req), r.proxy.Scrub(err.Error()))
		if parent.Err() != nil || !transientNetError(err) {
			return failed
		}
		return transientError{failed}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	// Through a proxy, the status may be the proxy's own (an http:// request it refuses):
	// the message says which way the answer came.
	status := resp.Status + r.via(req)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("bucket %q does not exist%s", bucket, r.via(req))
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("bucket %q: %s is not accepted by the storage endpoint (%s)%s", bucket, who, status, gcsMessage(body))
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("bucket %q: %s may not read it (%s)%s", bucket, who, status, gcsMessage(body))
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return transientError{fmt.Errorf("bucket %q: storage endpoint answered %s%s", bucket, status, gcsMessage(body))}
	case resp.StatusCode >= 300:
		return fmt.Errorf("bucket %q: storage endpoint answered %s%s", bucket, status, gcsMessage(body))
	}
	return nil
}

// tokenStatus finds the status in the errors of cloud.google.com/go/auth's STS exchange,
// impersonation and credential URL ("credentials: status code 503: ..."), which are text only.
var tokenStatus = lazyre.New(`status code (\d{3})\b`)

// tokenEndpointBusy says whether a token request failed with 429 or a 5xx: an *auth.Error
// (a service account key's token endpoint) or one of the library's text errors.
func tokenEndpointBusy(err error) bool {
	busy := func(code int) bool { return code == http.StatusTooManyRequests || code >= 500 }
	var ae *auth.Error
	if errors.As(err, &ae) && ae.Response != nil {
		return busy(ae.Response.StatusCode)
	}
	m := tokenStatus.FindStringSubmatch(err.Error())
	if m == nil {
		return false
	}
	code, _ := strconv.Atoi(m[1])
	return busy(code)
}

// transientNetError says whether a request's error is one a later attempt may not see: a
// timeout, a refused, reset or cut connection. A proxy that refuses the CONNECT is not (Go
// makes its error the bare status text): that is a setting to fix.
//
// Not every *net.OpError is: Go wraps a name that does not resolve, a TLS alert, a proxy's
// unknown CA and a SOCKS refusal in one too, and none of those changes by itself.
func transientNetError(err error) bool {
	var ne net.Error
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTimeout || dns.IsTemporary
	}
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// transientError is a bucket check's failure that a later attempt may not see: the endpoint
// timed out or dropped the connection, or answered 429 or a 5xx, all of which GCS clients
// retry.
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

// retryPolicy bounds the bucket check's attempts (checkBucketRetrying).
type retryPolicy struct {
	attempt time.Duration // one attempt
	first   time.Duration // the wait after the first transient failure, doubled after each
	max     time.Duration // the longest wait
	budget  time.Duration // no attempt starts past it
}

// preflightRetry is the sidecar's policy: at most preflightBudget, waits of 1, 2, 4, 8 s.
var preflightRetry = retryPolicy{attempt: preflightTimeout, first: preflightFirstRetry, max: preflightMaxRetry, budget: preflightBudget}

// checkBucketRetrying runs checkBucket until it passes, fails for good (the bucket missing,
// the identity refused), or p's budget is spent; each retry is logged, and the last error
// says how many attempts were made and over how long.
//
// Each attempt is bounded by p.attempt and by what is left of the budget, so the whole check
// ends within p.budget (and a little: the last request's own clean-up).
func checkBucketRetrying(ctx context.Context, p retryPolicy, log *slog.Logger, r *route, endpoint, bucket, keyFile, identity string) error {
	start := time.Now()
	pace := backoff.Doubling(max(p.first, minRetryWait), p.max)
	var prev error // the previous attempt's failure
	for attempt := 1; ; attempt++ {
		bound := min(p.attempt, p.budget-time.Since(start))
		began := time.Now()
		err := checkBucket(ctx, bound, r, endpoint, bucket, keyFile, identity)
		if err != nil && prev != nil && bound < p.attempt && time.Since(began) >= bound {
			// The last attempt ran out of what the budget left it, not of its own bound: its
			// "deadline exceeded" says nothing of the endpoint, the attempt before says more.
			err = fmt.Errorf("%w; the last attempt was cut short by the %s budget", prev, p.budget)
		}
		if err == nil {
			if attempt > 1 {
				log.Info("bucket check passed after retries", "attempts", attempt, "ms", time.Since(start).Milliseconds())
			}
			return nil
		}
		elapsed := time.Since(start)
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%d attempts in %s, then stopped)", err, attempt, elapsed.Round(100*time.Millisecond))
		}
		var te transientError
		if !errors.As(err, &te) {
			return err
		}
		prev = err
		wait := pace.Step()
		if elapsed+wait >= p.budget {
			return fmt.Errorf("%w (%d attempts in %s)", err, attempt, elapsed.Round(100*time.Millisecond))
		}
		log.Warn("bucket check failed; trying again", "attempt", attempt, "retryIn", wait.String(), "err", err.Error())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (%d attempts in %s, then stopped)", err, attempt, time.Since(start).Round(100*time.Millisecond))
		case <-t.C:
		}
	}
}

// credentialsFrom reads a credential file the node plugin wrote, as one of the two types it
// writes (a service account key or an external_account configuration) and no other: the
// type is checked, not trusted. gcsfuse reads the same file with
// credentials.DetectDefault(CredentialsFile), which takes any type. Token requests go
// through client (nil: the library's default).
func credentialsFrom(keyFile string, client *http.Client) (*auth.Credentials, error) {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%s is not JSON", keyFile)
	}
	t := authcreds.CredType(head.Type)
	if t != authcreds.ServiceAccount && t != authcreds.ExternalAccount {
		return nil, fmt.Errorf("%s has type %q, want %s or %s", keyFile, head.Type, authcreds.ServiceAccount, authcreds.ExternalAccount)
	}
	return authcreds.NewCredentialsFromJSON(t, b, &authcreds.DetectOptions{Scopes: []string{storageScope}, Client: client})
}

// gcsMessage is the message of a GCS JSON error body (": ..."), or "".
func gcsMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		return ""
	}
	return ": " + clip(e.Error.Message)
}

func clip(s string) string {
	if len(s) > maxReason {
		return s[:maxReason] + "..."
	}
	return s
}
