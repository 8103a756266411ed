package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

func TestGcsfuseArgs(t *testing.T) {
	v := &handoff.Volume{Bucket: "bkt", Flags: []string{"--implicit-dirs", "--file-cache-max-size-mb=100"}, Endpoint: "http://e/storage/v1/"}
	got := gcsfuseArgs(v, "/t/tmp", "/c/data", "")
	want := []string{"--foreground", "--temp-dir=/t/tmp", "--custom-endpoint=http://e/storage/v1/", "--anonymous-access",
		"--cache-dir=/c/data", "--implicit-dirs", "--file-cache-max-size-mb=100", "bkt", "/dev/fd/3"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("args = %q\nwant %q", got, want)
	}
	// Real GCS, no file cache asked: no endpoint flags, no cache dir.
	got = gcsfuseArgs(&handoff.Volume{Bucket: "bkt"}, "/t", "/c", "")
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
	if err := checkBucket(context.Background(), preflightTimeout, direct, ep, "there", "", ""); err != nil {
		t.Fatal(err)
	}
	if err := checkBucket(context.Background(), preflightTimeout, direct, ep, "gone", "", ""); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing bucket: %v", err)
	}
	if err := checkBucket(context.Background(), preflightTimeout, direct, ep, "broken", "", ""); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("server error: %v", err)
	}
	if err := checkBucket(context.Background(), preflightTimeout, direct, "http://127.0.0.1:1/storage/v1/", "x", "", ""); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("unreachable endpoint: %v", err)
	}
}

// TestCheckBucketWithCredentials: with a key file the check carries the access token the
// credentials give (got the way gcsfuse gets it), and a refusal names the identity.
func TestCheckBucketWithCredentials(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/sts":
			_ = r.ParseForm()
			if r.Form.Get("subject_token") == "busy.subject.token" {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			if r.Form.Get("subject_token") != "good.subject.token" {
				w.WriteHeader(http.StatusBadRequest)
				w.Write([]byte(`{"error":"invalid_grant","error_description":"the subject token was refused"}`))
				return
			}
			w.Write([]byte(stsAccessToken))
		case r.Header.Get("Authorization") != "Bearer access-1":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/storage/v1/b/mine":
			w.Write([]byte(`{"name":"mine"}`))
		default:
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"error":{"code":403,"message":"ns/app does not have storage.objects.list access"}}`))
		}
	}))
	defer srv.Close()
	keyFile := externalAccountKey(t, srv.URL+"/sts")
	token := filepath.Join(filepath.Dir(keyFile), "token")
	ep := srv.URL + "/storage/v1/"
	if err := checkBucket(context.Background(), preflightTimeout, direct, ep, "mine", keyFile, "sa ns/app"); err != nil {
		t.Fatal(err)
	}
	err := checkBucket(context.Background(), preflightTimeout, direct, ep, "theirs", keyFile, "sa ns/app")
	if err == nil || !strings.Contains(err.Error(), `bucket "theirs": sa ns/app may not read it (403 Forbidden): ns/app does not have`) {
		t.Fatalf("forbidden bucket: %v", err)
	}
	// Anonymous (no key file) on a bucket that wants a token.
	if err := checkBucket(context.Background(), preflightTimeout, direct, ep, "mine", "", ""); err == nil || !strings.Contains(err.Error(), "anonymous access is not accepted") {
		t.Fatalf("anonymous: %v", err)
	}
	if err := os.WriteFile(token, []byte("bad.subject.token"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = checkBucket(context.Background(), preflightTimeout, direct, ep, "mine", keyFile, "sa ns/app")
	if err == nil || !strings.Contains(err.Error(), "sa ns/app was refused an access token") || !strings.Contains(err.Error(), "the subject token was refused") {
		t.Fatalf("refused token: %v", err)
	}
	if strings.Contains(err.Error(), "bad.subject.token") {
		t.Fatalf("the error quotes the token: %v", err)
	}
	if errors.As(err, new(transientError)) {
		t.Fatalf("a refused token is taken for a failure that a retry may not see: %v", err)
	}
	// A token endpoint that is busy (503) is tried again (checkBucketRetrying).
	if err := os.WriteFile(token, []byte("busy.subject.token"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = checkBucket(context.Background(), preflightTimeout, direct, ep, "mine", keyFile, "sa ns/app")
	if err == nil || !errors.As(err, new(transientError)) || !strings.Contains(err.Error(), "sa ns/app got no access token") {
		t.Fatalf("busy token endpoint: %v, want a failure a retry may not see", err)
	}
}

// A token endpoint that answers 500 is as busy as one answering 503: the bucket check tries
// again and the volume starts, where failing at once would have said the identity was refused
// a token. The retry is logged with its cause.
func TestCheckBucketRetriesATokenEndpointAnswering500(t *testing.T) {
	var stsCalls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/sts":
			if stsCalls.Add(1) == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				w.Write([]byte(`{"error":"server_error","error_description":"backend unavailable"}`))
				return
			}
			w.Write([]byte(stsAccessToken))
		case r.Header.Get("Authorization") != "Bearer access-1":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/storage/v1/b/mine":
			w.Write([]byte(`{"name":"mine"}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	keyFile := externalAccountKey(t, srv.URL+"/sts")
	var out syncbuf.Buffer
	err := checkBucketRetrying(context.Background(), fastRetry, slog.New(slog.NewTextHandler(&out, nil)), direct, srv.URL+"/storage/v1/", "mine", keyFile, "sa ns/app")
	if err != nil {
		t.Fatalf("token endpoint answering 500 once: %v, want the check to pass after a retry", err)
	}
	if n := stsCalls.Load(); n != 2 {
		t.Errorf("%d token requests, want 2 (the 500, then the token)", n)
	}
	if log := out.String(); strings.Count(log, "trying again") != 1 || !strings.Contains(log, "sa ns/app got no access token") || !strings.Contains(log, "passed after retries") {
		t.Errorf("the log has not the one retry, its cause and the pass:\n%s", log)
	}
}

func TestGcsfuseArgsWithKeyFile(t *testing.T) {
	v := &handoff.Volume{Bucket: "bkt", Endpoint: "http://e/storage/v1/", KeyFile: true}
	got := gcsfuseArgs(v, "/t", "", "/tmp/credentials/data/credentials.json")
	want := []string{"--foreground", "--temp-dir=/t", "--custom-endpoint=http://e/storage/v1/", "--key-file=/tmp/credentials/data/credentials.json", "bkt", "/dev/fd/3"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("args = %q\nwant %q", got, want)
	}
	got = gcsfuseArgs(&handoff.Volume{Bucket: "bkt", KeyFile: true}, "/t", "", "/k.json")
	if want := []string{"--foreground", "--temp-dir=/t", "--key-file=/k.json", "bkt", "/dev/fd/3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("args = %q, want %q", got, want)
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

// A configuration that cannot work fails at start, naming what is wrong.
func TestNewValidates(t *testing.T) {
	good := Config{TmpDir: "/gcsfuse-tmp", Mode: contract.ModeNative, GcsfusePath: "/gcsfuse"}
	if _, err := New(good); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tt := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.TmpDir = "" }, "not an absolute path"},
		{func(c *Config) { c.Mode = "sometimes" }, "mode"},
		{func(c *Config) { c.GcsfusePath = "" }, "gcsfuse"},
		{func(c *Config) { c.Grace = -time.Second }, "negative"},
		{func(c *Config) { c.CacheDir = "cache" }, "cache"},
		{func(c *Config) { c.CredentialConfig = []byte(`{"type": "external_account"}`) }, "GCSFUSE_CREDENTIAL_CONFIG"},
		{func(c *Config) {
			c.CredentialConfig, c.Mode = []byte(`{"type": "external_account"}`), contract.ModeShared
		}, "not the node's shared mounter's"},
	} {
		cfg := good
		tt.mutate(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) error = %v, want one containing %q", cfg, err, tt.want)
		}
	}
}

// TestCredentialsFromTakesOnlyTheNodePluginsTypes: the sidecar reads a credential file as
// a service account key or an external_account configuration, never another type (an
// executable-sourced or user credential planted in the emptyDir).
func TestCredentialsFromTakesOnlyTheNodePluginsTypes(t *testing.T) {
	dir := t.TempDir()
	for body, ok := range map[string]bool{
		`{"type":"authorized_user","client_id":"x","client_secret":"y","refresh_token":"z"}`: false,
		`{"type":"impersonated_service_account"}`:                                            false,
		`not json`: false,
		`{"type":"external_account","audience":"//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k","subject_token_type":"urn:ietf:params:oauth:token-type:jwt","token_url":"http://127.0.0.1:1/sts","credential_source":{"file":"/nonexistent"}}`: true,
	} {
		f := filepath.Join(dir, "credentials.json")
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := credentialsFrom(f, nil); (err == nil) != ok {
			t.Errorf("credentialsFrom(%s) = %v, want ok=%v", body, err, ok)
		}
	}
}

// Which credentials each volume's gcsfuse reads: the node plugin's per-volume file when the
// volume has an identity of its own (the pod's ConfigMap does not override it); otherwise
// the pod's credential ConfigMap's configuration, written for it alone (0600, in the
// volume's directory) and rewritten on a restart; otherwise none (the default credentials).
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	conf := []byte(`{"type": "external_account", "audience": "a"}`)
	s := &Sidecar{cfg: Config{TmpDir: dir, CredentialConfig: conf, CredentialConfigMap: "wif"}}
	own := &handoff.Volume{VolumeName: "own", KeyFile: true, Identity: "sa ns/app"}
	if kf, id, err := s.keyFile(own); err != nil || kf != podfiles.At(dir).CredentialsConfigFile("own") || id != "sa ns/app" {
		t.Errorf("a volume with its own identity: %q, %q, %v", kf, id, err)
	}
	pod := &handoff.Volume{VolumeName: "data"}
	kf, id, err := s.keyFile(pod)
	if err != nil || kf != podfiles.At(dir).CredentialConfigMapFile("data") || !strings.Contains(id, "credential ConfigMap wif") {
		t.Fatalf("a volume without one: %q, %q, %v", kf, id, err)
	}
	st, err := os.Stat(kf)
	if got, _ := os.ReadFile(kf); err != nil || st.Mode().Perm() != 0o600 || string(got) != string(conf) {
		t.Errorf("written %q with mode %v (%v); want the configuration, 0600", got, st.Mode(), err)
	}
	if err := os.WriteFile(kf, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.keyFile(pod); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(kf); string(got) != string(conf) {
		t.Errorf("a restart left %q", got)
	}
	if st, err := os.Stat(kf); err != nil {
		t.Error(err)
	} else if st.Mode().Perm() != 0o600 {
		t.Errorf("rewritten with mode %v, want 0600", st.Mode())
	}
	s.cfg.CredentialConfig = nil
	if kf, id, err := s.keyFile(&handoff.Volume{VolumeName: "adc"}); err != nil || kf != "" || id != "" {
		t.Errorf("no ConfigMap, no identity: %q, %q, %v; want the default credentials", kf, id, err)
	}
}

// externalAccountKey writes an external-account key file whose STS is stsURL and whose
// subject token file, "token" beside it, holds "good.subject.token", and returns its path.
func externalAccountKey(t *testing.T, stsURL string) string {
	t.Helper()
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	conf := `{"type":"external_account","audience":"//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k",
		"subject_token_type":"urn:ietf:params:oauth:token-type:jwt","token_url":"` + stsURL + `",
		"credential_source":{"file":"` + token + `","format":{"type":"text"}}}`
	keyFile := filepath.Join(dir, "credentials.json")
	if err := os.WriteFile(keyFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("good.subject.token"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile
}

// stsAccessToken is the STS answer of the sidecar's credential tests: access token
// "access-1", good for two minutes.
const stsAccessToken = `{"access_token":"access-1","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":120}`
