package sidecar

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// checkBucket asks a custom (emulator) endpoint whether the bucket exists. gcsfuse skips
// that check when --custom-endpoint is set and then mounts a missing bucket as an empty
// directory whose writes fail only at close, so an app would run to the end and lose its
// output. Against Google Cloud Storage gcsfuse checks the bucket itself at mount time.
func checkBucket(ctx context.Context, endpoint, bucket string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := strings.TrimSuffix(endpoint, "/") + "/b/" + url.PathEscape(bucket)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("bucket check: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bucket %q: storage endpoint unreachable: %w", bucket, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("bucket %q does not exist", bucket)
	case resp.StatusCode >= 300:
		return fmt.Errorf("bucket %q: storage endpoint answered %s", bucket, resp.Status)
	}
	return nil
}
