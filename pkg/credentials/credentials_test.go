package credentials

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authcreds "cloud.google.com/go/auth/credentials"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/sakey"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

const (
	testProvider = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/kube-1"
	testToken    = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bnM6YXBwIn0.c2lnbmF0dXJlLXNlY3JldA"
	testSA       = "reader@my-project.iam.gserviceaccount.com"
	// sidecarTokenFile is podfiles.At(contract.TmpMountPath).CredentialsTokenFile("data").
	sidecarTokenFile = "/gcsfuse-tmp/credentials/data/token"
)

// testKeyPEM is one RSA key for the whole package.
func testKeyPEM(t testing.TB) string { return sakey.PEM(t) }

func tokensAttr(aud, tok string) string {
	b, _ := json.Marshal(map[string]any{aud: map[string]any{"token": tok, "expirationTimestamp": "2030-01-02T03:04:05Z"}})
	return string(b)
}

func baseAttrs() map[string]string {
	return map[string]string{
		contract.AttrBucketName: "bucket-a", contract.CtxPodNamespace: "ns", contract.CtxSAName: "app",
		contract.CtxSATokens: tokensAttr(contract.TokenAudience, testToken),
	}
}

func keyJSON(t testing.TB, mutate func(map[string]any)) string {
	k := map[string]any{
		"type": "service_account", "project_id": "my-project", "private_key_id": "0123abcd",
		"private_key": testKeyPEM(t), "client_email": testSA, "client_id": "1234567890",
		"auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": DefaultKeyTokenURI,
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
		"client_x509_cert_url":        "https://www.googleapis.com/robot/v1/metadata/x509/reader",
		"universe_domain":             "googleapis.com",
	}
	if mutate != nil {
		mutate(k)
	}
	b, _ := json.Marshal(k)
	return string(b)
}

func build(cfg Config, attrs, secrets map[string]string) (*Plan, error) {
	return Build(cfg.WithDefaults(), Request{Volume: "data", Bucket: "bucket-a", Attributes: attrs, Secrets: secrets, SidecarTokenFile: sidecarTokenFile})
}

func TestBuildChoosesTheKind(t *testing.T) {
	// No provider anywhere, no Secret: ADC, and no file for gcsfuse.
	p, err := build(Config{}, baseAttrs(), nil)
	if err != nil || p.Kind != KindADC || p.KeyFile() || p.Config != nil {
		t.Fatalf("ADC: %v, %v", p, err)
	}
	if !strings.Contains(p.Identity, "ns/app") {
		t.Errorf("ADC identity %q does not name the pod's service account", p.Identity)
	}
	// The node plugin's provider: federation with the kubelet's token.
	p, err = build(Config{Provider: testProvider}, baseAttrs(), nil)
	if err != nil || p.Kind != KindFederation || string(p.Token) != testToken {
		t.Fatalf("node-level federation: %v, %v", p, err)
	}
	if !p.TokenExpiry.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("token expiry %v", p.TokenExpiry)
	}
	if want := "Kubernetes service account ns/app through " + testProvider; p.Identity != want {
		t.Errorf("identity %q, want %q", p.Identity, want)
	}
	// A volume's provider, service account and token URL override the node's.
	attrs := baseAttrs()
	other := strings.Replace(testProvider, "kube-1", "kube-2", 1)
	attrs[contract.AttrWorkloadIdentityProvider] = other
	attrs[contract.AttrServiceAccount] = testSA
	attrs[contract.AttrTokenURL] = "http://127.0.0.1:9/sts"
	p, err = build(Config{Provider: testProvider, AllowedTokenURLs: []string{"http://127.0.0.1:9/sts"}, IAMCredentialsURL: "http://127.0.0.1:9"}, attrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal(p.Config, &conf); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"type": "external_account", "audience": other, "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
		"token_url":                         "http://127.0.0.1:9/sts",
		"credential_source":                 map[string]any{"file": sidecarTokenFile, "format": map[string]any{"type": "text"}},
		"service_account_impersonation_url": "http://127.0.0.1:9/v1/projects/-/serviceAccounts/" + testSA + ":generateAccessToken",
		"universe_domain":                   "googleapis.com",
	}
	if fmt.Sprint(conf) != fmt.Sprint(want) {
		t.Errorf("external_account configuration\n got %v\nwant %v", conf, want)
	}
	if !strings.HasSuffix(p.Identity, " as "+testSA) || strings.Contains(string(p.Config), testToken) {
		t.Errorf("identity %q; the configuration must point to the token, not hold it", p.Identity)
	}
	// A Secret: the service account key, rewritten with the fields gcsfuse uses.
	p, err = build(Config{}, baseAttrs(), map[string]string{contract.SecretKeyServiceAccount: keyJSON(t, nil)})
	if err != nil || p.Kind != KindKey {
		t.Fatalf("key: %v, %v", p, err)
	}
	if p.Identity != "service account "+testSA+" (key 0123abcd)" {
		t.Errorf("key identity %q", p.Identity)
	}
	var kf map[string]any
	if err := json.Unmarshal(p.Config, &kf); err != nil {
		t.Fatal(err)
	}
	if _, ok := kf["auth_provider_x509_cert_url"]; ok || kf["token_uri"] != DefaultKeyTokenURI || kf["private_key"] != testKeyPEM(t) {
		t.Errorf("key file %v", kf)
	}
}

func TestBuildRefusals(t *testing.T) {
	fed := Config{Provider: testProvider}
	with := func(k, v string) map[string]string { a := baseAttrs(); a[k] = v; return a }
	without := func(k string) map[string]string { a := baseAttrs(); delete(a, k); return a }
	key := func(m func(map[string]any)) map[string]string {
		return map[string]string{contract.SecretKeyServiceAccount: keyJSON(t, m)}
	}
	cases := []struct {
		name    string
		cfg     Config
		attrs   map[string]string
		secrets map[string]string
		want    string
	}{
		{"no tokenRequests", fed, without(contract.CtxSATokens), nil, "needs tokenRequests with audience"},
		{"installed without a token audience", Config{NoServiceAccountToken: true}, with(contract.AttrWorkloadIdentityProvider, testProvider), nil,
			"installed without one (the chart's tokenRequest.audience is empty"},
		{"other audience", fed, with(contract.CtxSATokens, tokensAttr("other", testToken)), nil, `audiences ["other"] but not "gcsfuse.csi.storage"`},
		{"garbled tokens", fed, with(contract.CtxSATokens, `{"gcsfuse.csi.storage":`+testToken), nil, "not the expected JSON"},
		{"token not a JWT", fed, with(contract.CtxSATokens, tokensAttr(contract.TokenAudience, "a b")), nil, "not a JWT"},
		{"bad provider", Config{}, with(contract.AttrWorkloadIdentityProvider, "https://evil.example/x"), nil, "workloadIdentityProvider"},
		{"bad service account", fed, with(contract.AttrServiceAccount, "root@example.com"), nil, "serviceAccount"},
		{"token URL not allowed", fed, with(contract.AttrTokenURL, "https://evil.example/token"), nil, "not one of the node plugin's token URLs"},
		{"service account without federation", Config{}, with(contract.AttrServiceAccount, testSA), nil, "need Workload Identity Federation"},
		{"Secret and federation", fed, with(contract.AttrWorkloadIdentityProvider, testProvider), key(nil), "choose one"},
		{"Secret without key.json", Config{}, baseAttrs(), map[string]string{"password": "x"}, `has no key "key.json" (it has "password")`},
		{"not JSON", Config{}, baseAttrs(), map[string]string{contract.SecretKeyServiceAccount: "-----BEGIN PRIVATE KEY-----"}, "is not a service account key"},
		{"unknown field", Config{}, baseAttrs(), key(func(k map[string]any) { k["credential_source"] = map[string]any{"file": "/etc/shadow"} }), "unknown field"},
		{"external_account in a Secret", Config{}, baseAttrs(), key(func(k map[string]any) { k["type"] = "external_account" }), "only service_account keys"},
		{"token_uri elsewhere", Config{}, baseAttrs(), key(func(k map[string]any) { k["token_uri"] = "https://evil.example/token" }), "not one of the node plugin's"},
		{"other universe", Config{}, baseAttrs(), key(func(k map[string]any) { k["universe_domain"] = "evil.example" }), "universe_domain"},
		{"not an RSA key", Config{}, baseAttrs(), key(func(k map[string]any) {
			k["private_key"] = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
		}), "no valid private_key"},
		{"bad email", Config{}, baseAttrs(), key(func(k map[string]any) { k["client_email"] = "me@example.com" }), "client_email"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := build(c.cfg, c.attrs, c.secrets)
			if err == nil {
				t.Fatalf("accepted: %v", p)
			}
			var ce *Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), "volume data (bucket bucket-a") {
				t.Errorf("error %q does not name the volume and bucket", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			assertNoSecret(t, err.Error())
		})
	}
}

// assertNoSecret fails if s holds the test token or any line of the test key.
func assertNoSecret(t testing.TB, s string) {
	t.Helper()
	if strings.Contains(s, testToken) || strings.Contains(s, "c2lnbmF0dXJlLXNlY3JldA") {
		t.Fatalf("the token leaked: %q", s)
	}
	for _, l := range strings.Split(testKeyPEM(t), "\n") {
		if len(l) > 16 && !strings.HasPrefix(l, "-----") && strings.Contains(s, l) {
			t.Fatalf("the private key leaked: %q", s)
		}
	}
}

func TestPlanPrintsNoSecret(t *testing.T) {
	p, err := build(Config{Provider: testProvider}, baseAttrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := build(Config{}, baseAttrs(), map[string]string{contract.SecretKeyServiceAccount: keyJSON(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, plan := range []*Plan{p, k} {
		var buf strings.Builder
		fmt.Fprintf(&buf, "%v %+v %#v %s", plan, plan, plan, plan)
		assertNoSecret(t, buf.String())
		if !strings.Contains(buf.String(), plan.Identity) {
			t.Errorf("printed plan %q lacks the identity", buf.String())
		}
	}
}

// TestConfigsWorkWithGcsfusesAuthLibrary hands both generated files to the library gcsfuse
// v3.13.0 reads --key-file with (cloud.google.com/go/auth v0.23.2, credentials.DetectDefault
// with CredentialsFile, as its GetClientAuthOptionsAndTokenSource does) and checks what it
// sends: the external_account configuration makes it read the token file and exchange it at
// the STS URL (then impersonate), the key makes it sign a JWT grant to token_uri.
func TestConfigsWorkWithGcsfusesAuthLibrary(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/sts":
			seen["sts"] = r.Form.Get("subject_token") + "|" + r.Form.Get("audience") + "|" + r.Form.Get("subject_token_type")
			fmt.Fprint(w, `{"access_token":"sts-token","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":120}`)
		case strings.HasSuffix(r.URL.Path, ":generateAccessToken"):
			seen["impersonate"] = r.URL.Path + "|" + r.Header.Get("Authorization")
			fmt.Fprintf(w, `{"accessToken":"sa-token","expireTime":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
		case r.URL.Path == "/oauth2/token":
			seen["jwt"] = r.Form.Get("grant_type") + "|" + fmt.Sprint(len(strings.Split(r.Form.Get("assertion"), ".")))
			fmt.Fprint(w, `{"access_token":"key-token","token_type":"Bearer","expires_in":120}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	tokenFile := filepath.Join(t.TempDir(), "token")
	cfg := Config{Provider: testProvider, TokenURL: srv.URL + "/sts", IAMCredentialsURL: srv.URL, ServiceAccount: testSA,
		KeyTokenURIs: []string{srv.URL + "/oauth2/token"}}.WithDefaults()
	fed, err := Build(cfg, Request{Volume: "data", Bucket: "b", Attributes: baseAttrs(), SidecarTokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, fed.Token, 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := Build(cfg, Request{Volume: "data", Bucket: "b", Attributes: baseAttrs(),
		Secrets: map[string]string{contract.SecretKeyServiceAccount: keyJSON(t, func(k map[string]any) { k["token_uri"] = srv.URL + "/oauth2/token" })}})
	if err != nil {
		t.Fatal(err)
	}
	for name, plan := range map[string]*Plan{"federation": fed, "key": key} {
		f := filepath.Join(t.TempDir(), "credentials.json")
		if err := os.WriteFile(f, plan.Config, 0o600); err != nil {
			t.Fatal(err)
		}
		//lint:ignore SA1019 the exact call gcsfuse v3.13.0 makes with --key-file (storageutil.GetClientAuthOptionsAndTokenSource)
		creds, err := authcreds.DetectDefault(&authcreds.DetectOptions{CredentialsFile: f, Scopes: []string{"https://www.googleapis.com/auth/devstorage.full_control"}})
		if err != nil {
			t.Fatalf("%s: the library refused the file: %v", name, err)
		}
		tok, err := creds.Token(context.Background())
		if err != nil {
			t.Fatalf("%s: token: %v", name, err)
		}
		want := map[string]string{"federation": "sa-token", "key": "key-token"}[name]
		if tok.Value != want {
			t.Errorf("%s: token %q, want %q", name, tok.Value, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := testToken + "|" + testProvider + "|urn:ietf:params:oauth:token-type:jwt"; seen["sts"] != want {
		t.Errorf("STS got %q, want %q", seen["sts"], want)
	}
	if want := "/v1/projects/-/serviceAccounts/" + testSA + ":generateAccessToken|Bearer sts-token"; seen["impersonate"] != want {
		t.Errorf("impersonation got %q, want %q", seen["impersonate"], want)
	}
	if seen["jwt"] != "urn:ietf:params:oauth:grant-type:jwt-bearer|3" {
		t.Errorf("token endpoint got %q", seen["jwt"])
	}
}

func TestGKEIdentityNamespaceProvider(t *testing.T) {
	gke := "identitynamespace:my-project.svc.id.goog:https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/prod-1"
	cfg := Config{Provider: gke, TokenAudience: "my-project.svc.id.goog"}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	attrs := baseAttrs()
	attrs[contract.CtxSATokens] = tokensAttr("my-project.svc.id.goog", testToken)
	p, err := Build(cfg, Request{Volume: "data", Bucket: "b", Attributes: attrs, SidecarTokenFile: sidecarTokenFile})
	if err != nil || !strings.Contains(string(p.Config), `"audience": "`+gke+`"`) {
		t.Fatalf("%v %v", p, err)
	}
	for _, bad := range []string{"identitynamespace:my-project.svc.id.goog:https://evil.example/x", "identitynamespace:x:y"} {
		if err := (Config{Provider: bad}).WithDefaults().Validate(); err == nil {
			t.Errorf("accepted provider %q", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Provider: testProvider, ServiceAccount: testSA}.WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"provider":                 {Provider: "pool"},
		"service account":          {ServiceAccount: "x@gmail.com"},
		"token URL":                {TokenURL: "ftp://sts"},
		"allowed URL":              {AllowedTokenURLs: []string{"https://user:pw@sts/x"}},
		"key token URI":            {KeyTokenURIs: []string{"https://h/t?x=1"}},
		"audience":                 {TokenAudience: "a b"},
		"provider without a token": {Provider: testProvider, NoServiceAccountToken: true},
	} {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}

// FuzzBuild feeds arbitrary volume attributes, kubelet token JSON and Secret contents to
// Build: it never panics, never puts a secret in an error, and whatever it accepts is a
// configuration of the expected shape that points into the sidecar's directory.
func FuzzBuild(f *testing.F) {
	f.Add("", "", "", tokensAttr(contract.TokenAudience, testToken), "", false)
	f.Add(testProvider, testSA, "", tokensAttr(contract.TokenAudience, testToken), "", false)
	f.Add(testProvider, "", DefaultTokenURL, `{"gcsfuse.csi.storage":{"token":"a.b.c"}}`, "", true)
	f.Add("", "", "", "", keyJSON(f, nil), false)
	f.Add("", "", "", "", `{"type":"service_account","private_key":"`+testToken+`"}`, false)
	f.Add("//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/abc/providers/abc", "a@b.gserviceaccount.com", "", "{}", "", false)
	f.Fuzz(func(t *testing.T, provider, sa, tokenURL, tokens, key string, nodeProvider bool) {
		attrs := map[string]string{contract.CtxPodNamespace: "ns", contract.CtxSAName: "app"}
		for k, v := range map[string]string{contract.AttrWorkloadIdentityProvider: provider, contract.AttrServiceAccount: sa,
			contract.AttrTokenURL: tokenURL, contract.CtxSATokens: tokens} {
			if v != "" {
				attrs[k] = v
			}
		}
		var secrets map[string]string
		if key != "" {
			secrets = map[string]string{contract.SecretKeyServiceAccount: key}
		}
		cfg := Config{}
		if nodeProvider {
			cfg.Provider = testProvider
		}
		p, err := build(cfg, attrs, secrets)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			// Nothing secret from the input reaches the message: the token and the key
			// are only ever named, never quoted. The non-secret attributes that errors do
			// quote are taken out first, raw and quoted: the fuzzer made a token equal to
			// the serviceAccount attribute, and one spelt by that attribute's %q escapes.
			msg := err.Error()
			for _, public := range []string{provider, sa, tokenURL} {
				if public != "" {
					msg = strings.ReplaceAll(strings.ReplaceAll(msg, strconv.Quote(public), ""), public, "")
				}
			}
			for _, secret := range []string{tokenOf(tokens), key} {
				if len(secret) >= 8 && strings.Contains(msg, secret) {
					t.Fatalf("error %q quotes a secret %q", err, secret)
				}
			}
			return
		}
		printed := fmt.Sprintf("%v %+v %#v", p, p, p)
		if len(p.Token) >= 8 && strings.Contains(printed, string(p.Token)) {
			t.Fatalf("printed plan holds the token: %s", printed)
		}
		switch p.Kind {
		case KindADC:
			if p.Config != nil || p.Token != nil {
				t.Fatalf("ADC with files: %v", p)
			}
		case KindFederation:
			var conf externalAccount
			if err := json.Unmarshal(p.Config, &conf); err != nil {
				t.Fatal(err)
			}
			if conf.Type != "external_account" || conf.CredentialSource.File != sidecarTokenFile || !providerPattern.MatchString(conf.Audience) ||
				checkURL(conf.TokenURL) != nil || len(p.Token) == 0 || !tokenPattern.Match(p.Token) {
				t.Fatalf("federation configuration %s", p.Config)
			}
		case KindKey:
			var kf keyFile
			if err := json.Unmarshal(p.Config, &kf); err != nil {
				t.Fatal(err)
			}
			if kf.Type != "service_account" || kf.TokenURI != DefaultKeyTokenURI || !validRSAKey(kf.PrivateKey) {
				t.Fatalf("key file %s", p.Config)
			}
		default:
			t.Fatalf("kind %q", p.Kind)
		}
	})
}

func tokenOf(tokens string) string {
	var m map[string]struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal([]byte(tokens), &m)
	return m[contract.TokenAudience].Token
}

// The GKE driver's identityProvider and identityPool name the same federation provider as
// workloadIdentityProvider would; what has no equivalent is refused, naming the attribute
// and the value.
func TestGKEDriverIdentityAttributes(t *testing.T) {
	const (
		cluster = "https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/prod-1"
		ns      = "identitynamespace:my-project.svc.id.goog:" + cluster
	)
	for _, tt := range []struct {
		name         string
		attrs        map[string]string
		secrets      map[string]string
		wantProvider string // the external_account audience; "" with wantErr, or for ADC
		wantErr      string
	}{
		{name: "cluster provider, pool from its project", attrs: map[string]string{"identityProvider": cluster}, wantProvider: ns},
		{name: "cluster provider and its pool", attrs: map[string]string{"identityProvider": cluster, "identityPool": "my-project.svc.id.goog"}, wantProvider: ns},
		{name: "cluster provider and another pool", attrs: map[string]string{"identityProvider": cluster, "identityPool": "fleet-host.svc.id.goog"},
			wantProvider: "identitynamespace:fleet-host.svc.id.goog:" + cluster},
		{name: "zonal cluster", attrs: map[string]string{"identityProvider": "https://container.googleapis.com/v1/projects/my-project/zones/us-central1-a/clusters/c"},
			wantProvider: "identitynamespace:my-project.svc.id.goog:https://container.googleapis.com/v1/projects/my-project/zones/us-central1-a/clusters/c"},
		{name: "pool provider as it is", attrs: map[string]string{"identityProvider": testProvider}, wantProvider: testProvider},
		{name: "empty provider is the default", attrs: map[string]string{"identityProvider": ""}},
		{name: "with hostNetworkPodKSA", attrs: map[string]string{"identityProvider": cluster, "hostNetworkPodKSA": "true"}, wantProvider: ns},
		// Without federation: Application Default Credentials, the pod's own account on GKE
		// but for a hostNetwork pod (the webhook warns of that one).
		{name: "hostNetworkPodKSA without federation", attrs: map[string]string{"hostNetworkPodKSA": "true"}},
		{name: "pool alone", attrs: map[string]string{"identityPool": "my-project.svc.id.goog"},
			wantErr: `volume attribute identityPool "my-project.svc.id.goog" (the GKE driver's) needs identityProvider: this driver does not ask the metadata server`},
		{name: "bad pool", attrs: map[string]string{"identityProvider": cluster, "identityPool": "my-pool"},
			wantErr: `volume attribute identityPool "my-pool" (the GKE driver's): want PROJECT.svc.id.goog`},
		{name: "pool with a pool provider", attrs: map[string]string{"identityProvider": testProvider, "identityPool": "my-project.svc.id.goog"},
			wantErr: `volume attribute identityPool "my-project.svc.id.goog" (the GKE driver's) applies only to a GKE cluster's identity provider`},
		{name: "bad provider", attrs: map[string]string{"identityProvider": "https://evil.example/v1/projects/my-project/locations/x/clusters/c"},
			wantErr: `volume attribute identityProvider "https://evil.example/v1/projects/my-project/locations/x/clusters/c" (the GKE driver's): want https://container.googleapis.com/`},
		{name: "both spellings", attrs: map[string]string{"identityProvider": cluster, contract.AttrWorkloadIdentityProvider: ns},
			wantErr: `volume attributes workloadIdentityProvider "` + ns + `" and identityProvider "` + cluster + `" (the GKE driver's) both name the provider: given more than once`},
		{name: "and a Secret", attrs: map[string]string{"identityProvider": cluster}, secrets: map[string]string{contract.SecretKeyServiceAccount: "{}"},
			wantErr: "both a nodePublishSecretRef and Workload Identity Federation attributes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			attrs := baseAttrs()
			for k, v := range tt.attrs {
				attrs[k] = v
			}
			p, err := build(Config{}, attrs, tt.secrets)
			// Choose, which tools that predict NodePublishVolume call (pkg/audit), refuses
			// what Build refuses, with its reason, and chooses the same provider.
			choice, chooseErr := Choose(Config{}.WithDefaults(), attrs, len(tt.secrets) > 0)
			if tt.wantErr != "" {
				var ce *Error
				if !errors.As(err, &ce) || ce.Precondition || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a volume *Error containing %q", err, tt.wantErr)
				}
				if chooseErr == nil || ce.Reason != chooseErr.Error() {
					t.Errorf("Choose: %v, want Build's reason %q", chooseErr, ce.Reason)
				}
				return
			}
			if chooseErr != nil || choice.Provider != tt.wantProvider || choice.FromGKEDriver != (tt.wantProvider != "") {
				t.Errorf("Choose: %+v, %v; want provider %q from the GKE driver's attributes", choice, chooseErr, tt.wantProvider)
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantProvider == "" {
				if p.Kind != KindADC {
					t.Fatalf("plan %v, want %s", p, KindADC)
				}
				return
			}
			var conf externalAccount
			if p.Kind != KindFederation || json.Unmarshal(p.Config, &conf) != nil || conf.Audience != tt.wantProvider {
				t.Fatalf("plan %v, audience %q, want federation through %q", p, conf.Audience, tt.wantProvider)
			}
			if !strings.Contains(p.Identity, tt.wantProvider) {
				t.Errorf("identity %q does not name the provider %q", p.Identity, tt.wantProvider)
			}
		})
	}
}

// A driver installed without a token audience still serves every volume that needs no
// token: Application Default Credentials and keys from a Secret.
func TestNoServiceAccountTokenKeepsTheOtherKinds(t *testing.T) {
	cfg := Config{NoServiceAccountToken: true}
	if err := cfg.WithDefaults().Validate(); err != nil {
		t.Fatalf("no token audience, no provider: %v", err)
	}
	if p, err := build(cfg, baseAttrs(), nil); err != nil || p.Kind != KindADC {
		t.Errorf("ADC: %v, %v", p, err)
	}
	if p, err := build(cfg, baseAttrs(), map[string]string{contract.SecretKeyServiceAccount: keyJSON(t, nil)}); err != nil || p.Kind != KindKey {
		t.Errorf("key: %v, %v", p, err)
	}
}
