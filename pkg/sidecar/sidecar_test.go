package sidecar

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
)

func TestDrainDeadline(t *testing.T) {
	for _, tt := range []struct{ grace, want time.Duration }{
		{30 * time.Second, 27 * time.Second},
		{2 * time.Second, 1500 * time.Millisecond},
		{300 * time.Second, 297 * time.Second},
		{time.Second, 500 * time.Millisecond},
	} {
		got := drainDeadline(tt.grace)
		if got != tt.want {
			t.Errorf("drainDeadline(%s) = %s, want %s", tt.grace, got, tt.want)
		}
		if got >= tt.grace {
			t.Errorf("drainDeadline(%s) = %s is not before the kubelet's SIGKILL", tt.grace, got)
		}
	}
}

func TestGcsfuseArgs(t *testing.T) {
	v := &handoff.Volume{Bucket: "bkt", Flags: []string{"--implicit-dirs", "--file-cache-max-size-mb=100"}, Endpoint: "http://e/storage/v1/"}
	got := gcsfuseArgs(v, "/t/tmp", "/c/data")
	want := []string{"--foreground", "--temp-dir=/t/tmp", "--custom-endpoint=http://e/storage/v1/", "--anonymous-access",
		"--cache-dir=/c/data", "--implicit-dirs", "--file-cache-max-size-mb=100", "bkt", "/dev/fd/3"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("args = %q\nwant %q", got, want)
	}
	// Real GCS, no file cache asked: no endpoint flags, no cache dir.
	got = gcsfuseArgs(&handoff.Volume{Bucket: "bkt"}, "/t", "/c")
	if want := []string{"--foreground", "--temp-dir=/t", "bkt", "/dev/fd/3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("args = %q, want %q", got, want)
	}
}

func TestRecheckFlags(t *testing.T) {
	for _, tt := range []struct {
		flags []string
		ok    bool
	}{
		{[]string{"--implicit-dirs", "--uid=5"}, true},
		{nil, true},
		{[]string{"--key-file=/x"}, false},
		{[]string{"implicit-dirs"}, false},
		{[]string{"--ro"}, false},
		{[]string{"--uid=1 --key-file=/x"}, false},
	} {
		if err := recheckFlags(tt.flags); (err == nil) != tt.ok {
			t.Errorf("recheckFlags(%q) = %v, want ok=%v", tt.flags, err, tt.ok)
		}
	}
}

func TestGcsfuseMessage(t *testing.T) {
	msg, sev := gcsfuseMessage(`{"severity":"ERROR","message":"bucket gone\n"}`)
	if msg != "bucket gone" || sev != "ERROR" {
		t.Fatalf("got %q %q", msg, sev)
	}
	msg, sev = gcsfuseMessage("plain text line")
	if msg != "plain text line" || sev != "" {
		t.Fatalf("got %q %q", msg, sev)
	}
}

func TestCheckBucket(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/storage/v1/b/there":
			w.Write([]byte(`{"name":"there"}`))
		case "/storage/v1/b/broken":
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	ep := srv.URL + "/storage/v1/"
	if err := checkBucket(context.Background(), ep, "there"); err != nil {
		t.Fatal(err)
	}
	if err := checkBucket(context.Background(), ep, "gone"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing bucket: %v", err)
	}
	if err := checkBucket(context.Background(), ep, "broken"); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("server error: %v", err)
	}
	if err := checkBucket(context.Background(), "http://127.0.0.1:1/storage/v1/", "x"); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("unreachable endpoint: %v", err)
	}
}

func TestExitResultFailure(t *testing.T) {
	for _, tt := range []struct {
		r    exitResult
		fail bool
	}{
		{exitResult{Clean: true}, false},
		{exitResult{Requested: true}, false},
		{exitResult{}, true},
	} {
		if tt.r.Failure() != tt.fail {
			t.Errorf("%+v.Failure() = %v", tt.r, !tt.fail)
		}
	}
}
