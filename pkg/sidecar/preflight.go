package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/auth"
	authcreds "cloud.google.com/go/auth/credentials"
)

const (
	// preflightTimeout bounds the bucket check, an access token included.
	preflightTimeout = 10 * time.Second
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
func checkBucket(ctx context.Context, r *route, endpoint, bucket, keyFile, identity string) error {
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
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
			return fmt.Errorf("bucket %q: %s was refused an access token: %s", bucket, who, clip(r.proxy.Scrub(err.Error())))
		}
		req.Header.Set("Authorization", "Bearer "+tok.Value)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		// A proxy that refuses a CONNECT makes Go's error its bare status text ("Forbidden"):
		// the message names the proxy (redacted) so that the cause is plain.
		return fmt.Errorf("bucket %q: storage endpoint unreachable%s: %s", bucket, r.via(req), r.proxy.Scrub(err.Error()))
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
	case resp.StatusCode >= 300:
		return fmt.Errorf("bucket %q: storage endpoint answered %s%s", bucket, status, gcsMessage(body))
	}
	return nil
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
