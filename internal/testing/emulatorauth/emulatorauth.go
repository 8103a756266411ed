// Package emulatorauth puts the GCS emulator behind the checks Google's APIs make, so that
// the driver's credentials are proven with real tokens on a machine without a cloud:
//
//   - an OAuth 2.0 token endpoint (POST /token) that accepts a service account's JWT grant
//     (RS256, signed with a key whose public part it holds: the keys it made itself);
//   - an STS endpoint (POST /sts/v1/token, RFC 8693 token exchange) that exchanges a
//     Kubernetes service account token for an access token once the API server's
//     TokenReview says it is valid for the expected audience;
//   - an IAM Credentials endpoint (POST /v1/projects/-/serviceAccounts/EMAIL:generateAccessToken)
//     that lets an allowed identity impersonate a service account;
//   - a per-bucket policy on the storage API: a bucket with a policy answers only requests
//     with a valid, unexpired bearer token whose identity the policy lets read (GET, HEAD)
//     or write (everything else): 401 without one, 403 when not allowed. A bucket without a
//     policy stays anonymous, so the rest of the suite runs as before.
//
// Access tokens expire quickly (Config.TokenLifetime, 2 minutes by default), so clients
// must refresh. An admin API (/_admin/..., answered only to Config.AdminAllowed) creates
// service accounts and their keys, sets policies, mints tokens for test checks, and lists
// every secret the emulator issued or received, so that a test can grep logs for them.
package emulatorauth

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults and bounds.
const (
	DefaultTokenLifetime = 2 * time.Minute
	// maxGrantLifetime bounds a JWT grant's exp - iat, as Google's token endpoint does.
	maxGrantLifetime = time.Hour
	// clockSkew is tolerated on a grant's iat and exp.
	clockSkew = time.Minute
	// maxBody bounds a request body the auth layer reads itself.
	maxBody = 64 << 10
	// maxIssued bounds the issued-secrets list; the oldest are dropped past it.
	maxIssued = 100_000
	// reviewTimeout bounds one TokenReview.
	reviewTimeout = 10 * time.Second
	// rsaBits is the size of the keys the emulator makes.
	rsaBits = 2048
)

// Grant and token types.
const (
	grantJWTBearer     = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	grantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	tokenTypeJWT       = "urn:ietf:params:oauth:token-type:jwt"
	tokenTypeAccess    = "urn:ietf:params:oauth:token-type:access_token"
)

// Reviewer validates a Kubernetes service account token for an audience (TokenReview) and
// returns its user name ("system:serviceaccount:NS:NAME").
type Reviewer interface {
	Review(ctx context.Context, token, audience string) (string, error)
}

// Config configures the auth layer.
type Config struct {
	// BaseURL is the emulator's own URL: the token endpoint's address in the keys it makes
	// (token_uri) and the audience a JWT grant must name.
	BaseURL string
	// TokenLifetime is how long an access token is valid. Default DefaultTokenLifetime.
	TokenLifetime time.Duration
	// Provider is the Workload Identity provider name the STS accepts as audience ("" no STS).
	Provider string
	// TokenAudience is the audience a Kubernetes token must carry.
	TokenAudience string
	// Reviewer validates Kubernetes tokens (nil: no STS).
	Reviewer Reviewer
	// AdminAllowed says whether a request may use the admin API (nil: nobody).
	AdminAllowed func(*http.Request) bool
	Log          *slog.Logger
}

// Layer is the auth layer in front of the storage API.
type Layer struct {
	cfg     Config
	storage http.Handler
	now     func() time.Time

	mu       sync.Mutex
	accounts map[string]*account // by email
	policies map[string]*Policy  // by bucket
	imperson map[string][]string // service account email -> identities that may impersonate it
	tokens   map[string]grant    // access token -> grant
	issued   []string            // every secret issued or received (for log checks)
	faults   map[faultKey]*Fault // by bucket and operation: the next storage requests to fail (faults.go)
}

type account struct {
	keys map[string]*rsa.PublicKey // by key ID
}

type grant struct {
	identity string
	expiry   time.Time
}

// Policy says which identities may read and write a bucket. An identity is
// "serviceAccount:EMAIL" or "system:serviceaccount:NS:NAME".
type Policy struct {
	Readers []string `json:"readers"`
	Writers []string `json:"writers"`
}

// New returns the auth layer in front of storage.
func New(cfg Config, storage http.Handler) (*Layer, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("emulator auth: base URL %q: want http(s)://host:port", cfg.BaseURL)
	}
	if cfg.TokenLifetime == 0 {
		cfg.TokenLifetime = DefaultTokenLifetime
	}
	if cfg.TokenLifetime < time.Second {
		return nil, fmt.Errorf("emulator auth: token lifetime %s is shorter than a second", cfg.TokenLifetime)
	}
	if (cfg.Provider == "") != (cfg.Reviewer == nil) || (cfg.Provider != "" && cfg.TokenAudience == "") {
		return nil, errors.New("emulator auth: the STS needs a provider, a token audience and a reviewer together")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Layer{cfg: cfg, storage: storage, now: time.Now, accounts: map[string]*account{}, policies: map[string]*Policy{},
		imperson: map[string][]string{}, tokens: map[string]grant{}}, nil
}

// TokenURL is the token endpoint's address (the token_uri of the keys it makes).
func (l *Layer) TokenURL() string { return strings.TrimSuffix(l.cfg.BaseURL, "/") + "/token" }

// STSURL is the STS endpoint's address.
func (l *Layer) STSURL() string { return strings.TrimSuffix(l.cfg.BaseURL, "/") + "/sts/v1/token" }

// ServeHTTP routes the auth endpoints and guards the storage API.
func (l *Layer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/token":
		l.serveToken(w, r)
	case p == "/sts/v1/token":
		l.serveSTS(w, r)
	case strings.HasPrefix(p, "/v1/projects/-/serviceAccounts/") && strings.HasSuffix(p, ":generateAccessToken"):
		l.serveImpersonate(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/v1/projects/-/serviceAccounts/"), ":generateAccessToken"))
	case strings.HasPrefix(p, "/_admin/"):
		if l.cfg.AdminAllowed == nil || !l.cfg.AdminAllowed(r) {
			http.Error(w, "the admin API answers only to this node", http.StatusForbidden)
			return
		}
		l.serveAdmin(w, r)
	default:
		l.serveStorage(w, r)
	}
}

// oauthError answers as OAuth endpoints do. desc never quotes a token.
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}

// gcsError answers as the storage JSON API does.
func gcsError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": status, "message": msg,
		"errors": []map[string]string{{"message": msg, "reason": http.StatusText(status)}}}})
}

// issue makes an access token for identity.
func (l *Layer) issue(identity string) (string, time.Time) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := "ya29.emu-" + base64.RawURLEncoding.EncodeToString(b[:])
	exp := l.now().Add(l.cfg.TokenLifetime)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for t, g := range l.tokens { // bounded by the tokens issued within one lifetime
		if now.After(g.expiry) {
			delete(l.tokens, t)
		}
	}
	l.tokens[tok] = grant{identity: identity, expiry: exp}
	l.remember(tok)
	l.cfg.Log.Info("access token issued", "identity", identity, "expires", exp.Format(time.RFC3339))
	return tok, exp
}

// remember records a secret for Issued; the caller holds mu.
func (l *Layer) remember(secret string) {
	if len(l.issued) >= maxIssued {
		l.issued = l.issued[1:]
	}
	l.issued = append(l.issued, secret)
}

// identityOf returns the identity of a request's bearer token ("" and a reason if none).
func (l *Layer) identityOf(r *http.Request) (string, string) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", "no bearer token"
	}
	l.mu.Lock()
	g, ok := l.tokens[tok]
	l.mu.Unlock()
	switch {
	case !ok:
		return "", "unknown access token"
	case l.now().After(g.expiry):
		return "", "access token expired at " + g.expiry.Format(time.RFC3339)
	}
	return g.identity, ""
}

func accessTokenResponse(w http.ResponseWriter, tok string, lifetime time.Duration, exchange bool) {
	resp := map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(lifetime / time.Second)}
	if exchange {
		resp["issued_token_type"] = tokenTypeAccess
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// postForm reads a POSTed form (bounded) into r.PostForm, or answers the OAuth error and
// returns false.
func postForm(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		oauthError(w, http.StatusMethodNotAllowed, "invalid_request", "POST only")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "unreadable form")
		return false
	}
	return true
}

// serveToken is the OAuth 2.0 token endpoint for service account JWT grants (RFC 7523).
func (l *Layer) serveToken(w http.ResponseWriter, r *http.Request) {
	if !postForm(w, r) {
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != grantJWTBearer {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", fmt.Sprintf("grant_type %q: want %s", gt, grantJWTBearer))
		return
	}
	l.mu.Lock()
	l.remember(r.PostForm.Get("assertion"))
	l.mu.Unlock()
	email, err := l.verifyGrant(r.PostForm.Get("assertion"))
	if err != nil {
		l.cfg.Log.Warn("JWT grant refused", "err", err)
		oauthError(w, http.StatusBadRequest, "invalid_grant", err.Error())
		return
	}
	tok, _ := l.issue("serviceAccount:" + email)
	accessTokenResponse(w, tok, l.cfg.TokenLifetime, false)
}

// verifyGrant checks an RS256 JWT grant against the keys the emulator made and returns
// the service account's email. Its errors never quote the assertion.
func (l *Layer) verifyGrant(assertion string) (string, error) {
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return "", errors.New("the assertion is not a JWT")
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	var claims struct {
		Iss   string  `json:"iss"`
		Aud   string  `json:"aud"`
		Scope string  `json:"scope"`
		Iat   float64 `json:"iat"`
		Exp   float64 `json:"exp"`
	}
	if err := decodeSegment(parts[0], &hdr); err != nil {
		return "", errors.New("the JWT header does not decode")
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return "", errors.New("the JWT claims do not decode")
	}
	if hdr.Alg != "RS256" {
		return "", fmt.Errorf("JWT alg %q: want RS256", hdr.Alg)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "", errors.New("the JWT signature does not decode")
	}
	l.mu.Lock()
	acct := l.accounts[claims.Iss]
	var keys []*rsa.PublicKey
	if acct != nil {
		if k, ok := acct.keys[hdr.Kid]; ok {
			keys = []*rsa.PublicKey{k}
		} else if hdr.Kid == "" {
			for _, k := range acct.keys {
				keys = append(keys, k)
			}
		}
	}
	l.mu.Unlock()
	if acct == nil {
		return "", fmt.Errorf("service account %q is unknown", claims.Iss)
	}
	if len(keys) == 0 {
		return "", fmt.Errorf("service account %q has no key %q", claims.Iss, hdr.Kid)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	verified := false
	for _, k := range keys {
		verified = verified || rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], sig) == nil
	}
	if !verified {
		return "", fmt.Errorf("the JWT of %q is not signed by its key", claims.Iss)
	}
	now := l.now()
	iat, exp := time.Unix(int64(claims.Iat), 0), time.Unix(int64(claims.Exp), 0)
	switch {
	case claims.Aud != l.TokenURL():
		return "", fmt.Errorf("JWT aud %q: want %s", claims.Aud, l.TokenURL())
	case claims.Scope == "":
		return "", errors.New("the JWT names no scope")
	case iat.After(now.Add(clockSkew)):
		return "", errors.New("the JWT is issued in the future")
	case !exp.After(now.Add(-clockSkew)):
		return "", errors.New("the JWT has expired")
	case exp.Sub(iat) > maxGrantLifetime:
		return "", fmt.Errorf("the JWT lives %s, more than %s", exp.Sub(iat), maxGrantLifetime)
	}
	return claims.Iss, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(seg, "="))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serveSTS is the token exchange endpoint (RFC 8693) for Kubernetes service account tokens.
func (l *Layer) serveSTS(w http.ResponseWriter, r *http.Request) {
	if l.cfg.Reviewer == nil {
		oauthError(w, http.StatusNotFound, "invalid_request", "this emulator has no STS (no --wif-provider)")
		return
	}
	if !postForm(w, r) {
		return
	}
	f := r.PostForm
	subject := f.Get("subject_token")
	if subject != "" {
		l.mu.Lock()
		l.remember(subject)
		l.mu.Unlock()
	}
	switch {
	case f.Get("grant_type") != grantTokenExchange:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "grant_type: want "+grantTokenExchange)
		return
	case f.Get("subject_token_type") != tokenTypeJWT:
		oauthError(w, http.StatusBadRequest, "invalid_request", "subject_token_type: want "+tokenTypeJWT)
		return
	case f.Get("audience") != l.cfg.Provider:
		oauthError(w, http.StatusBadRequest, "invalid_target", fmt.Sprintf("audience %q is not this pool's provider %q", f.Get("audience"), l.cfg.Provider))
		return
	case subject == "":
		oauthError(w, http.StatusBadRequest, "invalid_request", "no subject_token")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
	defer cancel()
	user, err := l.cfg.Reviewer.Review(ctx, subject, l.cfg.TokenAudience)
	if err != nil {
		// As a pool provider with no allowed audiences of its own does, Google's STS also
		// takes a token for the provider's default audience, "https:" and its name (what
		// a credential ConfigMap's projected token carries).
		if u, derr := l.cfg.Reviewer.Review(ctx, subject, "https:"+l.cfg.Provider); derr == nil {
			user, err = u, nil
		}
	}
	if err != nil {
		l.cfg.Log.Warn("subject token refused", "err", err)
		oauthError(w, http.StatusBadRequest, "invalid_grant", "the Kubernetes API server did not accept the subject token for audience "+
			l.cfg.TokenAudience+": "+err.Error())
		return
	}
	tok, _ := l.issue(user)
	accessTokenResponse(w, tok, l.cfg.TokenLifetime, true)
}

// serveImpersonate is IAM Credentials' generateAccessToken.
func (l *Layer) serveImpersonate(w http.ResponseWriter, r *http.Request, email string) {
	if r.Method != http.MethodPost {
		gcsError(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	caller, why := l.identityOf(r)
	if caller == "" {
		gcsError(w, http.StatusUnauthorized, "impersonation needs a valid token: "+why)
		return
	}
	l.mu.Lock()
	allowed := slices.Contains(l.imperson[email], caller)
	_, known := l.accounts[email]
	l.mu.Unlock()
	if !known || !allowed {
		gcsError(w, http.StatusForbidden, fmt.Sprintf("%s may not impersonate %s (iam.serviceAccounts.getAccessToken)", caller, email))
		return
	}
	tok, exp := l.issue("serviceAccount:" + email)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"accessToken": tok, "expireTime": exp.UTC().Format(time.RFC3339)})
}

// bucketOf returns the bucket a storage API request addresses ("" for none: listing or
// creating buckets).
func bucketOf(r *http.Request) string {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	pick := func(i int) string {
		if i >= len(segs) {
			return ""
		}
		b, err := url.PathUnescape(segs[i])
		if err != nil {
			return segs[i]
		}
		return b
	}
	switch {
	case len(segs) >= 3 && segs[0] == "storage" && segs[1] == "v1" && segs[2] == "b":
		return pick(3)
	case len(segs) >= 4 && (segs[0] == "upload" || segs[0] == "download") && segs[1] == "storage" && segs[2] == "v1" && segs[3] == "b":
		return pick(4)
	case len(segs) >= 1 && segs[0] != "storage" && segs[0] != "upload" && segs[0] != "download" && segs[0] != "batch":
		return pick(0) // XML-style object paths: /BUCKET/OBJECT
	}
	return ""
}

// serveStorage enforces a bucket's policy, if it has one, and passes the request on.
func (l *Layer) serveStorage(w http.ResponseWriter, r *http.Request) {
	bucket := bucketOf(r)
	if strings.HasPrefix(r.URL.Path, "/batch/") {
		l.mu.Lock()
		guarded := len(l.policies) > 0
		l.mu.Unlock()
		if guarded {
			gcsError(w, http.StatusForbidden, "batch requests are not supported while buckets have policies")
			return
		}
	}
	if !l.serveFault(w, r, bucket) {
		return
	}
	l.mu.Lock()
	pol := l.policies[bucket]
	l.mu.Unlock()
	if pol != nil {
		identity, why := l.identityOf(r)
		if identity == "" {
			gcsError(w, http.StatusUnauthorized, fmt.Sprintf("bucket %s requires authentication: %s", bucket, why))
			return
		}
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		if !slices.Contains(pol.Writers, identity) && (!read || !slices.Contains(pol.Readers, identity)) {
			perm := "storage.objects.create"
			if read {
				perm = "storage.objects.get"
			}
			l.cfg.Log.Info("storage request denied", "bucket", bucket, "identity", identity, "method", r.Method)
			gcsError(w, http.StatusForbidden, fmt.Sprintf("%s does not have %s access to bucket %s", identity, perm, bucket))
			return
		}
	}
	l.storage.ServeHTTP(w, r)
}

// CreateServiceAccount registers email (if new), makes a new RSA key for it and returns the
// key file, as gcloud iam service-accounts keys create writes it.
func (l *Layer) CreateServiceAccount(email string) ([]byte, error) {
	if email == "" || strings.ContainsAny(email, " /\"") || !strings.Contains(email, "@") {
		return nil, fmt.Errorf("service account email %q", email)
	}
	k, err := rsa.GenerateKey(rand.Reader, rsaBits)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	var id [20]byte
	_, _ = rand.Read(id[:])
	kid := hex.EncodeToString(id[:])
	project := "emulator-project"
	if _, dom, ok := strings.Cut(email, "@"); ok {
		if p, _, ok := strings.Cut(dom, "."); ok {
			project = p
		}
	}
	key := map[string]string{
		"type": "service_account", "project_id": project, "private_key_id": kid,
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": email, "client_id": "1" + kid[:19], "token_uri": l.TokenURL(),
	}
	b, err := json.Marshal(key)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	acct := l.accounts[email]
	if acct == nil {
		acct = &account{keys: map[string]*rsa.PublicKey{}}
		l.accounts[email] = acct
	}
	acct.keys[kid] = &k.PublicKey
	l.remember(key["private_key"])
	return b, nil
}

// SetPolicy sets (replaces) a bucket's policy; nil removes it (anonymous again).
func (l *Layer) SetPolicy(bucket string, p *Policy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p == nil {
		delete(l.policies, bucket)
		return
	}
	l.policies[bucket] = p
}

// AllowImpersonation lets identities impersonate the service account email.
func (l *Layer) AllowImpersonation(email string, identities []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.imperson[email] = append([]string(nil), identities...)
}

// Mint issues an access token for identity without any grant (admin: test checks).
func (l *Layer) Mint(identity string) string {
	tok, _ := l.issue(identity)
	return tok
}

// Issued lists every secret the emulator issued or received: access tokens, private keys,
// JWT grants and subject tokens.
func (l *Layer) Issued() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.issued...)
}

// serveAdmin is the admin API:
//
//	POST /_admin/serviceaccounts            {"email"}          -> the key file (JSON)
//	PUT  /_admin/policies/BUCKET            {"readers","writers"} (DELETE removes it)
//	PUT  /_admin/impersonation/EMAIL        {"identities"}
//	POST /_admin/tokens                     {"identity"}       -> {"access_token"}
//	GET  /_admin/issued                                        -> ["secret", ...]
//	PUT  /_admin/faults/BUCKET              a Fault: the next count requests (of op) misbehave
//	GET  /_admin/faults/BUCKET                                 -> {"op": requests still to fail}
//	DELETE /_admin/faults/BUCKET                               (disarms every fault of the bucket)
func (l *Layer) serveAdmin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/_admin/")
	name, arg, _ := strings.Cut(rest, "/")
	decode := func(v any) bool {
		if err := json.Unmarshal(body, v); err != nil {
			http.Error(w, "bad JSON: "+err.Error(), http.StatusBadRequest)
			return false
		}
		return true
	}
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case name == "serviceaccounts" && r.Method == http.MethodPost:
		var req struct {
			Email string `json:"email"`
		}
		if !decode(&req) {
			return
		}
		key, err := l.CreateServiceAccount(req.Email)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(key)
	case name == "policies" && arg != "" && r.Method == http.MethodPut:
		var p Policy
		if !decode(&p) {
			return
		}
		l.SetPolicy(arg, &p)
		l.cfg.Log.Info("bucket policy set", "bucket", arg, "readers", p.Readers, "writers", p.Writers)
		reply(p)
	case name == "policies" && arg != "" && r.Method == http.MethodDelete:
		l.SetPolicy(arg, nil)
		reply(map[string]string{})
	case name == "faults" && arg != "" && r.Method == http.MethodPut:
		var f Fault
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields() // a misspelt "delay" must not arm a plain fault
		if err := dec.Decode(&f); err != nil {
			http.Error(w, "bad fault: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := l.SetFault(arg, &f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.cfg.Log.Info("bucket fault set", "bucket", arg, "op", f.Op, "status", f.Status, "delayMs", f.DelayMS, "drop", f.Drop,
			"dropAfter", f.DropAfter, "count", f.Count)
		reply(f)
	case name == "faults" && arg != "" && r.Method == http.MethodDelete:
		_ = l.SetFault(arg, nil)
		reply(map[string]int{})
	case name == "faults" && arg != "" && r.Method == http.MethodGet:
		reply(l.FaultsLeft(arg))
	case name == "impersonation" && arg != "" && r.Method == http.MethodPut:
		var req struct {
			Identities []string `json:"identities"`
		}
		if !decode(&req) {
			return
		}
		l.AllowImpersonation(arg, req.Identities)
		reply(req)
	case name == "tokens" && r.Method == http.MethodPost:
		var req struct {
			Identity string `json:"identity"`
		}
		if !decode(&req) {
			return
		}
		if req.Identity == "" {
			http.Error(w, "no identity", http.StatusBadRequest)
			return
		}
		reply(map[string]string{"access_token": l.Mint(req.Identity)})
	case name == "issued" && r.Method == http.MethodGet:
		reply(l.Issued())
	default:
		http.Error(w, "unknown admin call", http.StatusNotFound)
	}
}
