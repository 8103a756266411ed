package emulatorauth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authcreds "cloud.google.com/go/auth/credentials"
	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	provider = "//iam.googleapis.com/projects/0/locations/global/workloadIdentityPools/local/providers/kubernetes"
	audience = "gcsfuse.csi.storage"
	scope    = "https://www.googleapis.com/auth/devstorage.full_control"
)

// reviewer accepts the tokens it knows, for their audience.
type reviewer struct {
	mu    sync.Mutex
	users map[string]string // token -> user
	auds  map[string]string // token -> audience
	calls int
}

func (r *reviewer) Review(_ context.Context, token, aud string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	u, ok := r.users[token]
	if !ok {
		return "", errors.New("TokenReview: invalid bearer token")
	}
	if r.auds[token] != aud {
		return "", fmt.Errorf("TokenReview: the token is not for audience %q", aud)
	}
	return u, nil
}

type env struct {
	layer   *Layer
	srv     *httptest.Server
	rev     *reviewer
	storage func() []string // the requests the storage handler got
}

func newEnv(t *testing.T) *env {
	t.Helper()
	var mu sync.Mutex
	var got []string
	storage := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path)
		mu.Unlock()
		fmt.Fprint(w, `{"ok":true}`)
	})
	e := &env{rev: &reviewer{users: map[string]string{}, auds: map[string]string{}}, storage: func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}}
	var h http.Handler = http.NotFoundHandler()
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(e.srv.Close)
	l, err := New(Config{BaseURL: e.srv.URL, Provider: provider, TokenAudience: audience, Reviewer: e.rev,
		AdminAllowed: func(r *http.Request) bool { return r.Header.Get("X-Test-Admin") == "yes" },
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil))}, storage)
	if err != nil {
		t.Fatal(err)
	}
	e.layer, h = l, l
	return e
}

func (e *env) do(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// tokenFrom gets an access token through cloud.google.com/go/auth from a credential file,
// the way gcsfuse does with --key-file.
func tokenFrom(t *testing.T, file []byte) (string, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(p, file, 0o600); err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 the exact call gcsfuse v3.13.0 makes with --key-file (storageutil.GetClientAuthOptionsAndTokenSource)
	creds, err := authcreds.DetectDefault(&authcreds.DetectOptions{CredentialsFile: p, Scopes: []string{scope}})
	if err != nil {
		return "", err
	}
	tok, err := creds.Token(context.Background())
	if err != nil {
		return "", err
	}
	return tok.Value, nil
}

func TestServiceAccountKeyGrant(t *testing.T) {
	e := newEnv(t)
	key, err := e.layer.CreateServiceAccount("writer@emulator-project.iam.gserviceaccount.com")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenFrom(t, key)
	if err != nil {
		t.Fatalf("the token endpoint refused a grant signed with the key it made: %v", err)
	}
	e.layer.SetPolicy("bucket-a", &Policy{Writers: []string{"serviceAccount:writer@emulator-project.iam.gserviceaccount.com"}})
	if code, body := e.do(t, "POST", "/upload/storage/v1/b/bucket-a/o", tok); code != 200 {
		t.Fatalf("write with the key's token: %d %s", code, body)
	}
	// A key the emulator did not make (same email, other key pair) is refused.
	var k map[string]string
	_ = json.Unmarshal(key, &k)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKCS8PrivateKey(other)
	k["private_key"] = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	forged, _ := json.Marshal(k)
	if _, err := tokenFrom(t, forged); err == nil || !strings.Contains(err.Error(), "not signed by its key") {
		t.Fatalf("a forged key got a token: %v", err)
	}
	// An unknown service account is refused.
	k["client_email"] = "nobody@emulator-project.iam.gserviceaccount.com"
	unknown, _ := json.Marshal(k)
	if _, err := tokenFrom(t, unknown); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("an unknown account got a token: %v", err)
	}
}

func externalAccount(e *env, tokenFile, impersonate string) []byte {
	c := map[string]any{"type": "external_account", "audience": provider, "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
		"token_url": e.layer.STSURL(), "credential_source": map[string]any{"file": tokenFile, "format": map[string]string{"type": "text"}}}
	if impersonate != "" {
		c["service_account_impersonation_url"] = e.srv.URL + "/v1/projects/-/serviceAccounts/" + impersonate + ":generateAccessToken"
	}
	b, _ := json.Marshal(c)
	return b
}

func TestSTSExchangesAKubernetesToken(t *testing.T) {
	e := newEnv(t)
	e.rev.users["ksa.token.a"], e.rev.auds["ksa.token.a"] = "system:serviceaccount:ns:app", audience
	e.rev.users["ksa.token.other-aud"], e.rev.auds["ksa.token.other-aud"] = "system:serviceaccount:ns:app", "https://kubernetes.default.svc"
	tokenFile := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(tokenFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ksa.token.a")
	tok, err := tokenFrom(t, externalAccount(e, tokenFile, ""))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	e.layer.SetPolicy("bucket-a", &Policy{Readers: []string{"system:serviceaccount:ns:app"}})
	e.layer.SetPolicy("bucket-b", &Policy{Writers: []string{"system:serviceaccount:ns:other"}})
	if code, _ := e.do(t, "GET", "/storage/v1/b/bucket-a/o", tok); code != 200 {
		t.Errorf("reader listing bucket-a: %d", code)
	}
	if code, _ := e.do(t, "GET", "/bucket-a/some/object", tok); code != 200 {
		t.Errorf("reader reading an object XML-style: %d", code)
	}
	if code, body := e.do(t, "POST", "/upload/storage/v1/b/bucket-a/o", tok); code != 403 || !strings.Contains(body, "system:serviceaccount:ns:app does not have storage.objects.create access to bucket bucket-a") {
		t.Errorf("reader writing bucket-a: %d %s", code, body)
	}
	if code, body := e.do(t, "GET", "/storage/v1/b/bucket-b", tok); code != 403 || !strings.Contains(body, "bucket-b") {
		t.Errorf("reading bucket-b: %d %s", code, body)
	}
	if code, _ := e.do(t, "GET", "/storage/v1/b/bucket-a/o", ""); code != 401 {
		t.Errorf("anonymous on a bucket with a policy: %d", code)
	}
	if code, _ := e.do(t, "GET", "/storage/v1/b/free/o", ""); code != 200 {
		t.Errorf("anonymous on a bucket without a policy: %d", code)
	}
	// A token for another audience, or one the API server does not know, is refused.
	for _, bad := range []string{"ksa.token.other-aud", "ksa.token.unknown"} {
		write(bad)
		_, err := tokenFrom(t, externalAccount(e, tokenFile, ""))
		if err == nil || !strings.Contains(err.Error(), "did not accept the subject token") {
			t.Errorf("%s: %v", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), bad) {
			t.Errorf("the STS error quotes the token: %v", err)
		}
	}
	// The wrong provider.
	form := url.Values{"grant_type": {grantTokenExchange}, "subject_token_type": {tokenTypeJWT}, "subject_token": {"ksa.token.a"},
		"audience": {"//iam.googleapis.com/projects/0/locations/global/workloadIdentityPools/other/providers/x"}}
	resp, err := http.PostForm(e.layer.STSURL(), form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("another provider: %d", resp.StatusCode)
	}
}

func TestImpersonation(t *testing.T) {
	e := newEnv(t)
	sa := "reader@emulator-project.iam.gserviceaccount.com"
	if _, err := e.layer.CreateServiceAccount(sa); err != nil {
		t.Fatal(err)
	}
	e.rev.users["ksa.token.a"], e.rev.auds["ksa.token.a"] = "system:serviceaccount:ns:app", audience
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("ksa.token.a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tokenFrom(t, externalAccount(e, tokenFile, sa)); err == nil || !strings.Contains(err.Error(), "may not impersonate") {
		t.Fatalf("impersonation without permission: %v", err)
	}
	e.layer.AllowImpersonation(sa, []string{"system:serviceaccount:ns:app"})
	tok, err := tokenFrom(t, externalAccount(e, tokenFile, sa))
	if err != nil {
		t.Fatal(err)
	}
	e.layer.SetPolicy("bucket-a", &Policy{Readers: []string{"serviceAccount:" + sa}})
	if code, body := e.do(t, "GET", "/storage/v1/b/bucket-a", tok); code != 200 {
		t.Fatalf("impersonated read: %d %s", code, body)
	}
}

func TestTokensExpire(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	e.layer.now = func() time.Time { return now }
	tok := e.layer.Mint("serviceAccount:x@p.iam.gserviceaccount.com")
	e.layer.SetPolicy("b", &Policy{Readers: []string{"serviceAccount:x@p.iam.gserviceaccount.com"}})
	if code, _ := e.do(t, "GET", "/storage/v1/b/b", tok); code != 200 {
		t.Fatalf("fresh token: %d", code)
	}
	now = now.Add(DefaultTokenLifetime + time.Second)
	if code, body := e.do(t, "GET", "/storage/v1/b/b", tok); code != 401 || !strings.Contains(body, "expired") {
		t.Fatalf("expired token: %d %s", code, body)
	}
}

func TestAdminAPI(t *testing.T) {
	e := newEnv(t)
	post := func(path, body string, admin bool) (int, string) {
		req, _ := http.NewRequest("PUT", e.srv.URL+path, strings.NewReader(body))
		if strings.HasSuffix(path, "serviceaccounts") || strings.HasSuffix(path, "tokens") {
			req.Method = "POST"
		}
		if admin {
			req.Header.Set("X-Test-Admin", "yes")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := post("/_admin/policies/b", `{"readers":["x"]}`, false); code != 403 {
		t.Fatalf("admin API from elsewhere: %d", code)
	}
	if code, body := post("/_admin/policies/b", `{"readers":["x"]}`, true); code != 200 {
		t.Fatalf("set policy: %d %s", code, body)
	}
	code, body := post("/_admin/tokens", `{"identity":"x"}`, true)
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &tok) != nil {
		t.Fatalf("mint: %d %s", code, body)
	}
	if code, _ := e.do(t, "GET", "/storage/v1/b/b/o", tok.AccessToken); code != 200 {
		t.Fatalf("minted token: %d", code)
	}
	code, body = post("/_admin/serviceaccounts", `{"email":"k@emulator-project.iam.gserviceaccount.com"}`, true)
	if code != 200 || !strings.Contains(body, `"token_uri":"`+e.layer.TokenURL()+`"`) {
		t.Fatalf("create key: %d %s", code, body)
	}
	issued := e.layer.Issued()
	var key map[string]string
	_ = json.Unmarshal([]byte(body), &key)
	joined := strings.Join(issued, "\n")
	if !strings.Contains(joined, tok.AccessToken) || !strings.Contains(joined, key["private_key"]) {
		t.Fatalf("issued list lacks the minted token or the key")
	}
}

func TestBucketOf(t *testing.T) {
	for path, want := range map[string]string{
		"/storage/v1/b":                  "",
		"/storage/v1/b/bkt":              "bkt",
		"/storage/v1/b/bkt/o/a%2Fb":      "bkt",
		"/upload/storage/v1/b/bkt/o":     "bkt",
		"/download/storage/v1/b/bkt/o/x": "bkt",
		"/bkt/dir/obj":                   "bkt",
		"/batch/storage/v1":              "",
	} {
		r := httptest.NewRequest("GET", path, nil)
		if got := bucketOf(r); got != want {
			t.Errorf("bucketOf(%s) = %q, want %q", path, got, want)
		}
	}
}

func TestTokenReviewer(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview)
		out := tr.DeepCopy()
		switch tr.Spec.Token {
		case "good":
			out.Status = authv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences, User: authv1.UserInfo{Username: "system:serviceaccount:ns:app"}}
		case "wrong-aud":
			out.Status = authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"api"}, User: authv1.UserInfo{Username: "u"}}
		default:
			out.Status = authv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, out, nil
	})
	r := TokenReviewer{Client: cs.AuthenticationV1()}
	if u, err := r.Review(context.Background(), "good", audience); err != nil || u != "system:serviceaccount:ns:app" {
		t.Fatalf("good: %q %v", u, err)
	}
	if _, err := r.Review(context.Background(), "wrong-aud", audience); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Fatalf("wrong audience: %v", err)
	}
	if _, err := r.Review(context.Background(), "bad", audience); err == nil || !strings.Contains(err.Error(), "invalid bearer token") {
		t.Fatalf("bad: %v", err)
	}
}

// TestFaults: PUT /_admin/faults/BUCKET makes exactly the next count requests for that
// bucket fail with the status (other buckets untouched), then storage answers again; a
// status a client would not retry is refused.
func TestFaults(t *testing.T) {
	e := newEnv(t)
	put := func(path, body string) int {
		req, _ := http.NewRequest("PUT", e.srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-Test-Admin", "yes")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put("/_admin/faults/b", `{"status":404,"count":1}`); code != 400 {
		t.Fatalf("fault status 404 accepted: %d", code)
	}
	if code := put("/_admin/faults/b", `{"status":503,"count":2}`); code != 200 {
		t.Fatalf("set fault: %d", code)
	}
	var got []int
	for range 3 {
		code, _ := e.do(t, "GET", "/storage/v1/b/b/o", "")
		got = append(got, code)
		other, _ := e.do(t, "GET", "/storage/v1/b/other/o", "")
		if other != 200 {
			t.Fatalf("bucket other failed too: %d", other)
		}
	}
	if fmt.Sprint(got) != "[503 503 200]" {
		t.Fatalf("bucket b answered %v, want [503 503 200]", got)
	}
}
