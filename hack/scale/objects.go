package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
)

// objectCheck counts the objects looked up and those with the right bytes, and lists the
// others.
type objectCheck struct {
	want, ok int
	bad      []string
}

func (c *objectCheck) add(o objectCheck) {
	c.want += o.want
	c.ok += o.ok
	c.bad = append(c.bad, o.bad...)
}

// patternMD5 is the base64 MD5 of size bytes of the workload's pattern (byte i is i % 251).
func patternMD5(size int) string {
	h := md5.New()
	buf := make([]byte, 0, 64<<10)
	for i := range size {
		buf = append(buf, byte(i%251))
		if len(buf) == cap(buf) {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	h.Write(buf)
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// checkObjects looks up each named object of bucket in the emulator: it must hold size bytes
// of the workload's pattern.
func (s *scale) checkObjects(ctx context.Context, bucket string, names []string, size int) objectCheck {
	c := objectCheck{want: len(names)}
	sum := patternMD5(size)
	var mu sync.Mutex
	idx := make(chan int)
	var wg sync.WaitGroup
	for range min(objectCheckers, len(names)) {
		wg.Go(func() { // ends when idx is closed
			for i := range idx {
				err := s.checkObject(ctx, bucket, names[i], size, sum)
				mu.Lock()
				if err != nil {
					c.bad = append(c.bad, fmt.Sprintf("%s/%s: %v", bucket, names[i], err))
				} else {
					c.ok++
				}
				mu.Unlock()
			}
		})
	}
	for i := range names {
		idx <- i
	}
	close(idx)
	wg.Wait()
	slices.Sort(c.bad)
	return c
}

func (s *scale) checkObject(ctx context.Context, bucket, name string, size int, sum string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.opts.gcsURL+"/storage/v1/b/"+url.PathEscape(bucket)+"/o/"+url.PathEscape(name), nil)
	if err != nil {
		return err
	}
	resp, err := s.gcs.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s", resp.Status, bytes.TrimSpace(msg))
	}
	var o struct {
		Size    string `json:"size"`
		MD5Hash string `json:"md5Hash"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&o); err != nil {
		return err
	}
	if o.Size != strconv.Itoa(size) || o.MD5Hash != sum {
		return fmt.Errorf("size %s md5 %s, want %d bytes of the pattern (md5 %s)", o.Size, o.MD5Hash, size, sum)
	}
	return nil
}
