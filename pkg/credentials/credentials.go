// Package credentials decides with which identity a volume's gcsfuse reads its bucket, and
// writes the files that carry that identity into the pod's gcsfuse-tmp emptyDir, where only
// the pod's sidecar can read them. Nothing else in the driver reads around it.
//
// Three ways, chosen per volume (Build):
//   - a service account key from a Secret: the volume's nodePublishSecretRef, which the
//     kubelet resolves in the pod's namespace and passes in NodePublishVolume's secrets
//     (the node plugin never reads Secrets itself); key contract.SecretKeyServiceAccount.
//   - Workload Identity Federation: when the node plugin (--wif-provider) or the volume
//     (contract.AttrWorkloadIdentityProvider) names a provider. The kubelet passes the pod's
//     own service account token for contract.TokenAudience (the CSIDriver's tokenRequests);
//     it goes into a token file, next to an external_account credential configuration that
//     tells gcsfuse to exchange it at the STS endpoint (and impersonate a service account).
//   - otherwise Application Default Credentials: no file, gcsfuse finds the identity itself
//     (on GKE with Workload Identity, the pod's own).
//
// Every value a volume can set goes through an allowlist, and no secret (token, private key)
// ever appears in an error, a log line or a Plan's printed form.
package credentials

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/lazyre"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Kind is how a volume authenticates.
type Kind string

// The kinds of credentials.
const (
	// KindADC: no key file; gcsfuse uses Application Default Credentials (on GKE with
	// Workload Identity, the pod's own identity through the metadata server).
	KindADC Kind = "application-default-credentials"
	// KindFederation: the pod's Kubernetes service account token exchanged at an STS.
	KindFederation Kind = "workload-identity-federation"
	// KindKey: a Google service account key from the volume's Secret.
	KindKey Kind = "service-account-key"
)

// Defaults of Config.
const (
	DefaultTokenURL          = "https://sts.googleapis.com/v1/token"
	DefaultIAMCredentialsURL = "https://iamcredentials.googleapis.com"
	DefaultKeyTokenURI       = "https://oauth2.googleapis.com/token"
)

const (
	// subjectTokenType is what a Kubernetes service account token is to an STS.
	subjectTokenType = "urn:ietf:params:oauth:token-type:jwt"
	// maxTokenBytes bounds a service account token (a JWT: a few KiB at most).
	maxTokenBytes = 16 << 10
	// maxKeyBytes bounds a service account key file (about 2.4 KiB for RSA 2048).
	maxKeyBytes = 64 << 10
	// universeDomain is the only universe a key or configuration may name.
	universeDomain = "googleapis.com"
)

var (
	// providerPattern is a Workload Identity pool provider's resource name, or a GKE
	// cluster's identity namespace ("identitynamespace:PROJECT.svc.id.goog:<the cluster's
	// identity provider URL>", the audience GKE's own tools exchange a pod's token for, which
	// serves hostNetwork pods that the metadata server cannot tell apart).
	providerPattern = lazyre.New(`^(//iam\.googleapis\.com/projects/[0-9]{1,20}/locations/global/workloadIdentityPools/[a-z0-9][a-z0-9-]{2,31}/providers/[a-z0-9][a-z0-9-]{2,31}|` +
		`identitynamespace:[a-z][a-z0-9-]{4,28}[a-z0-9]\.svc\.id\.goog:https://container\.googleapis\.com/v1/projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/(locations|zones)/[a-z0-9-]{1,63}/clusters/[a-z0-9-]{1,63})$`)
	// gkeClusterPattern is a GKE cluster's identity provider URL (the GKE driver's
	// identityProvider); its first group is the cluster's project.
	gkeClusterPattern = lazyre.New(`^https://container\.googleapis\.com/v1/projects/([a-z][a-z0-9-]{4,28}[a-z0-9])/(locations|zones)/[a-z0-9-]{1,63}/clusters/[a-z0-9-]{1,63}$`)
	// gkePoolPattern is a GKE identity pool, "PROJECT.svc.id.goog" (the GKE driver's identityPool).
	gkePoolPattern = lazyre.New(`^[a-z][a-z0-9-]{4,28}[a-z0-9]\.svc\.id\.goog$`)
	// iamProviderPattern is a Workload Identity pool provider's resource name.
	iamProviderPattern = lazyre.New(`^//iam\.googleapis\.com/projects/[0-9]{1,20}/locations/global/workloadIdentityPools/[a-z0-9][a-z0-9-]{2,31}/providers/[a-z0-9][a-z0-9-]{2,31}$`)
	// serviceAccountPattern is a Google service account's email.
	serviceAccountPattern = lazyre.New(`^[a-z0-9][a-z0-9-]{0,62}@[a-z0-9][a-z0-9-]{0,62}(\.[a-z0-9][a-z0-9-]{0,62}){0,4}\.gserviceaccount\.com$`)
	// keyIDPattern is a service account key's ID (hex), or an emulator's.
	keyIDPattern = lazyre.New(`^[A-Za-z0-9_-]{1,128}$`)
	// tokenPattern: a JWT's characters (base64url and dots).
	tokenPattern = lazyre.New(`^[A-Za-z0-9_.=-]+$`)
)

// Config is the node plugin's provider configuration; volumes may override part of it
// through contract.AttrWorkloadIdentityProvider, AttrServiceAccount and AttrTokenURL.
type Config struct {
	// Provider is the default Workload Identity Federation provider (the STS audience);
	// empty: federation only for volumes that name one.
	Provider string
	// SharedProvider is the provider of the shared mount mode's volumes that bring neither
	// a key nor a provider of their own, when Provider is empty (ForShared): their gcsfuse
	// runs in the node's mounter, where Application Default Credentials are the mounter's
	// identity, not the pod's; with it each pod's own service account token is exchanged
	// instead (on GKE: the cluster's identity namespace, what GKE's own node plugin
	// exchanges a pod's token at). Empty: such volumes get Application Default Credentials,
	// which the node plugin allows only in the namespaces a cluster admin names.
	SharedProvider string
	// TokenAudience is the audience of the kubelet's service account token to exchange
	// (one of the CSIDriver's tokenRequests). Default contract.TokenAudience.
	TokenAudience string
	// NoServiceAccountToken says the CSIDriver has no tokenRequests (the chart's
	// tokenRequest.audience is empty, and the node plugin was given --wif-token-audience=
	// empty): the kubelet passes no token, so federation is off. A node-wide Provider is
	// then refused at start, and a volume that asks for federation is refused at publish
	// saying why, instead of the node plugin waiting for a token that never comes.
	NoServiceAccountToken bool
	// TokenURL is the STS token exchange endpoint. Default DefaultTokenURL.
	TokenURL string
	// AllowedTokenURLs are further STS endpoints a volume may choose with AttrTokenURL.
	AllowedTokenURLs []string
	// ServiceAccount is the default service account to impersonate ("" none).
	ServiceAccount string
	// IAMCredentialsURL is the base of the impersonation endpoint
	// (<base>/v1/projects/-/serviceAccounts/<email>:generateAccessToken). Default
	// DefaultIAMCredentialsURL.
	IAMCredentialsURL string
	// KeyTokenURIs are the token_uri values a service account key may carry (where
	// gcsfuse sends the key's signed grant). Default: DefaultKeyTokenURI alone.
	KeyTokenURIs []string
}

// WithDefaults fills the empty fields of c with their defaults.
func (c Config) WithDefaults() Config {
	if c.TokenAudience == "" {
		c.TokenAudience = contract.TokenAudience
	}
	if c.TokenURL == "" {
		c.TokenURL = DefaultTokenURL
	}
	if c.IAMCredentialsURL == "" {
		c.IAMCredentialsURL = DefaultIAMCredentialsURL
	}
	if len(c.KeyTokenURIs) == 0 {
		c.KeyTokenURIs = []string{DefaultKeyTokenURI}
	}
	return c
}

// ForShared is the configuration of a shared mount mode volume: SharedProvider in place of
// an empty Provider.
func (c Config) ForShared() Config {
	if c.Provider == "" {
		c.Provider = c.SharedProvider
	}
	return c
}

// Validate reports the first thing wrong with c (after WithDefaults), naming the setting.
func (c Config) Validate() error {
	for _, p := range []struct{ value, flag string }{{c.Provider, "--wif-provider"}, {c.SharedProvider, "--shared-wif-provider"}} {
		if p.value != "" && c.NoServiceAccountToken {
			return fmt.Errorf("workload identity provider %q needs the pod's service account token, but the token audience is empty (no tokenRequests in the CSIDriver): set the chart's tokenRequest.audience, or leave %s out", p.value, p.flag)
		}
		if p.value != "" && !providerPattern.MatchString(p.value) {
			return fmt.Errorf("workload identity provider %q (%s): want //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER or identitynamespace:PROJECT.svc.id.goog:https://container.googleapis.com/v1/projects/PROJECT/locations/LOCATION/clusters/CLUSTER", p.value, p.flag)
		}
	}
	if c.TokenAudience == "" || len(c.TokenAudience) > 256 || strings.ContainsAny(c.TokenAudience, " \t\r\n\"") {
		return fmt.Errorf("token audience %q: want a non-empty string without spaces or quotes", c.TokenAudience)
	}
	if c.ServiceAccount != "" && !serviceAccountPattern.MatchString(c.ServiceAccount) {
		return fmt.Errorf("service account %q: want NAME@PROJECT.iam.gserviceaccount.com", c.ServiceAccount)
	}
	for _, u := range append(append([]string{c.TokenURL, c.IAMCredentialsURL}, c.AllowedTokenURLs...), c.KeyTokenURIs...) {
		if err := checkURL(u); err != nil {
			return err
		}
	}
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		strings.ContainsAny(s, " \t\r\n\"\\") {
		return fmt.Errorf("URL %q: want http(s)://host[:port]/path without credentials, query or fragment", s)
	}
	return nil
}

// Request is what NodePublishVolume says about a volume's identity.
type Request struct {
	// Volume and Bucket name the volume in errors.
	Volume, Bucket string
	// Attributes is the volume context: the kubelet's keys (pod, service account and its
	// tokens) and the volume's attributes.
	Attributes map[string]string
	// Secrets is NodePublishVolume's secrets: the data of the volume's nodePublishSecretRef.
	Secrets map[string]string
	// SidecarTokenFile is the volume's token file as the sidecar's gcsfuse sees it
	// (podfiles.Paths.CredentialsTokenFile): the external_account configuration points there.
	SidecarTokenFile string
}

// Plan is the identity of one volume and the files that carry it. Its printed and logged
// forms show the kind and identity only.
type Plan struct {
	Kind Kind
	// Identity names who reads the bucket, for Events and logs (never a secret).
	Identity string
	// Token is the service account token (federation; secret).
	Token []byte
	// TokenExpiry is when Token expires (from the kubelet).
	TokenExpiry time.Time
	// Config is the file gcsfuse reads with --key-file: an external_account configuration
	// or a service account key (secret). Empty for KindADC.
	Config []byte
}

// KeyFile reports whether gcsfuse gets --key-file (every kind but KindADC).
func (p *Plan) KeyFile() bool { return p.Kind != KindADC }

// String shows the kind and the identity, never the secrets.
func (p *Plan) String() string { return string(p.Kind) + " (" + p.Identity + ")" }

// GoString is String: %#v must not print the secrets either.
func (p *Plan) GoString() string { return p.String() }

// LogValue keeps the secrets out of structured logs.
func (p *Plan) LogValue() slog.Value {
	return slog.GroupValue(slog.String("kind", string(p.Kind)), slog.String("identity", p.Identity))
}

// Error is a credential problem a user can act on: it names the volume, the bucket and the
// identity, and never carries a secret.
type Error struct {
	Volume, Bucket, Identity string
	Reason                   string
	// Precondition: the request is well-formed but the cluster did not give what the
	// identity needs (the kubelet passed no token for the audience: the CSIDriver object
	// lacks tokenRequests). Otherwise the volume's own attributes or Secret are at fault.
	Precondition bool
}

func (e *Error) Error() string {
	who := ""
	if e.Identity != "" {
		who = ", identity " + e.Identity
	}
	return fmt.Sprintf("volume %s (bucket %s%s): %s", e.Volume, e.Bucket, who, e.Reason)
}

// Choice is what a volume's attributes choose for its identity, before any token or key is
// read: what NodePublishVolume can refuse from the volume's own definition.
type Choice struct {
	Kind Kind
	// Provider is the federation provider (the STS audience) of KindFederation: the
	// volume's workloadIdentityProvider, the one the GKE driver's identityProvider and
	// identityPool stand for, or the node plugin's.
	Provider string
	// FromGKEDriver is set when Provider comes from the GKE driver's identityProvider and
	// identityPool (gkeDriverProvider).
	FromGKEDriver bool
	// ServiceAccount is the service account to impersonate ("" none) and TokenURL the STS
	// endpoint, for KindFederation.
	ServiceAccount, TokenURL string
}

// errKeyAndFederation refuses a volume that has both a key (nodePublishSecretRef) and
// federation attributes. Its error names no identity: which one was meant is unclear.
var errKeyAndFederation = fmt.Errorf("the volume has both a nodePublishSecretRef and Workload Identity Federation attributes (%s, %s, %s, %s): choose one",
	contract.AttrWorkloadIdentityProvider, contract.AttrGKEIdentityProvider, contract.AttrServiceAccount, contract.AttrTokenURL)

// Choose checks the identity attributes of a volume (attrs, its volume context) against the
// node plugin's cfg (WithDefaults applied and Validate passed) and says which kind of
// credentials they choose; hasKey says that the volume brings a key (its
// nodePublishSecretRef: NodePublishVolume got secrets). Build calls it first and refuses
// what it refuses with its message, so a tool that predicts NodePublishVolume's answer
// from a volume's definition (pkg/audit) refuses the same volumes with the same words.
func Choose(cfg Config, attrs map[string]string, hasKey bool) (Choice, error) {
	provider, hasProvider := attrs[contract.AttrWorkloadIdentityProvider]
	gkeProvider, hasGKE, err := gkeDriverProvider(attrs)
	if err != nil {
		return Choice{}, err
	}
	if hasGKE {
		if hasProvider {
			return Choice{}, fmt.Errorf("volume attributes %s %q and %s %q (the GKE driver's) both name the provider: given more than once, keep one",
				contract.AttrWorkloadIdentityProvider, provider, contract.AttrGKEIdentityProvider, attrs[contract.AttrGKEIdentityProvider])
		}
		provider, hasProvider = gkeProvider, true
	}
	_, hasSA := attrs[contract.AttrServiceAccount]
	_, hasURL := attrs[contract.AttrTokenURL]
	if hasKey {
		if hasProvider || hasSA || hasURL {
			return Choice{}, errKeyAndFederation
		}
		return Choice{Kind: KindKey}, nil
	}
	if !hasProvider {
		provider = cfg.Provider
	} else if !providerPattern.MatchString(provider) {
		return Choice{}, fmt.Errorf("volume attribute %s %q: want //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER or identitynamespace:PROJECT.svc.id.goog:https://container.googleapis.com/v1/projects/PROJECT/locations/LOCATION/clusters/CLUSTER",
			contract.AttrWorkloadIdentityProvider, provider)
	}
	if provider == "" {
		if hasSA || hasURL {
			return Choice{}, fmt.Errorf("volume attributes %s and %s need Workload Identity Federation: set %s on the volume or --wif-provider on the node plugin",
				contract.AttrServiceAccount, contract.AttrTokenURL, contract.AttrWorkloadIdentityProvider)
		}
		return Choice{Kind: KindADC}, nil
	}
	sa := cfg.ServiceAccount
	if v, ok := attrs[contract.AttrServiceAccount]; ok {
		if v != "" && !serviceAccountPattern.MatchString(v) {
			return Choice{}, fmt.Errorf("volume attribute %s %q: want NAME@PROJECT.iam.gserviceaccount.com (or empty for none)", contract.AttrServiceAccount, v)
		}
		sa = v
	}
	tokenURL := cfg.TokenURL
	if v, ok := attrs[contract.AttrTokenURL]; ok {
		if v != cfg.TokenURL && !slices.Contains(cfg.AllowedTokenURLs, v) {
			return Choice{}, fmt.Errorf("volume attribute %s %q is not one of the node plugin's token URLs (%s)", contract.AttrTokenURL, v,
				strings.Join(append([]string{cfg.TokenURL}, cfg.AllowedTokenURLs...), ", "))
		}
		tokenURL = v
	}
	return Choice{Kind: KindFederation, Provider: provider, FromGKEDriver: hasGKE, ServiceAccount: sa, TokenURL: tokenURL}, nil
}

// Build decides the volume's credentials from the node plugin's cfg (WithDefaults applied
// and Validate passed) and the request.
func Build(cfg Config, req Request) (*Plan, error) {
	fail := func(identity, format string, args ...any) (*Plan, error) {
		return nil, &Error{Volume: req.Volume, Bucket: req.Bucket, Identity: identity, Reason: fmt.Sprintf(format, args...)}
	}
	attrs := req.Attributes
	ksa := kubernetesServiceAccount(attrs)
	choice, err := Choose(cfg, attrs, len(req.Secrets) > 0)
	switch {
	case errors.Is(err, errKeyAndFederation):
		return fail("", "%v", err)
	case err != nil:
		return fail(ksa, "%v", err)
	case choice.Kind == KindKey:
		return buildKey(cfg, req, fail)
	case choice.Kind == KindADC:
		return &Plan{Kind: KindADC, Identity: "application default credentials (on GKE with Workload Identity: " + ksa + ")"}, nil
	}
	provider, sa, tokenURL := choice.Provider, choice.ServiceAccount, choice.TokenURL
	identity := ksa + " through " + provider
	if sa != "" {
		identity += " as " + sa
	}
	if cfg.NoServiceAccountToken {
		return nil, &Error{Volume: req.Volume, Bucket: req.Bucket, Identity: identity, Precondition: true,
			Reason: "Workload Identity Federation needs the pod's service account token, and this driver is installed without one (the chart's tokenRequest.audience is empty, so the CSIDriver has no tokenRequests and the node plugin runs with --wif-token-audience= empty): set tokenRequest.audience"}
	}
	token, expiry, err := serviceAccountToken(attrs, cfg.TokenAudience)
	if err != nil {
		var missing *missingToken
		return nil, &Error{Volume: req.Volume, Bucket: req.Bucket, Identity: identity, Reason: err.Error(), Precondition: errors.As(err, &missing)}
	}
	if !path.IsAbs(req.SidecarTokenFile) || path.Clean(req.SidecarTokenFile) != req.SidecarTokenFile {
		return fail(identity, "internal error: the sidecar's token file %q is not a clean absolute path", req.SidecarTokenFile)
	}
	conf := externalAccount{
		Type:             "external_account",
		Audience:         provider,
		SubjectTokenType: subjectTokenType,
		TokenURL:         tokenURL,
		CredentialSource: fileSource{File: req.SidecarTokenFile, Format: fileFormat{Type: "text"}},
		UniverseDomain:   universeDomain,
	}
	if sa != "" {
		conf.ImpersonationURL = strings.TrimSuffix(cfg.IAMCredentialsURL, "/") + "/v1/projects/-/serviceAccounts/" + sa + ":generateAccessToken"
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fail(identity, "encode the external_account configuration: %v", err)
	}
	return &Plan{Kind: KindFederation, Identity: identity, Token: token, TokenExpiry: expiry, Config: append(b, '\n')}, nil
}

// gkeDriverProvider reads the GKE driver's identityProvider and identityPool as the
// federation provider they stand for, so that its volumes keep their identity unchanged.
// The GKE driver exchanges the pod's token at the STS with the audience
// "identitynamespace:POOL:URL" for a cluster's provider URL (the pool defaulting to the
// cluster project's "PROJECT.svc.id.goog"), and with a Workload Identity pool provider's
// name as it is: the same two forms contract.AttrWorkloadIdentityProvider takes. ok is
// false when neither attribute asks for a provider (identityProvider absent or empty, the
// GKE driver's "the cluster's own"). identityPool alone is refused: the GKE driver then
// asks the metadata server for the cluster's provider, which this driver never does (its
// node plugin may run anywhere); so is a pool with a pool provider's name, which holds
// its own pool.
func gkeDriverProvider(attrs map[string]string) (provider string, ok bool, err error) {
	url := attrs[contract.AttrGKEIdentityProvider]
	pool, hasPool := attrs[contract.AttrGKEIdentityPool]
	if hasPool && !gkePoolPattern.MatchString(pool) {
		return "", false, fmt.Errorf("volume attribute %s %q (the GKE driver's): want PROJECT.svc.id.goog", contract.AttrGKEIdentityPool, pool)
	}
	switch {
	case url == "" && hasPool:
		return "", false, fmt.Errorf("volume attribute %s %q (the GKE driver's) needs %s: this driver does not ask the metadata server for the cluster's identity provider; set %s to https://container.googleapis.com/v1/projects/PROJECT/locations/LOCATION/clusters/CLUSTER",
			contract.AttrGKEIdentityPool, pool, contract.AttrGKEIdentityProvider, contract.AttrGKEIdentityProvider)
	case url == "":
		return "", false, nil
	case iamProviderPattern.MatchString(url):
		if hasPool {
			return "", false, fmt.Errorf("volume attribute %s %q (the GKE driver's) applies only to a GKE cluster's identity provider, and %s %q is a Workload Identity pool provider, which names its pool itself",
				contract.AttrGKEIdentityPool, pool, contract.AttrGKEIdentityProvider, url)
		}
		return url, true, nil
	}
	m := gkeClusterPattern.FindStringSubmatch(url)
	if m == nil {
		return "", false, fmt.Errorf("volume attribute %s %q (the GKE driver's): want https://container.googleapis.com/v1/projects/PROJECT/locations/LOCATION/clusters/CLUSTER or //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER",
			contract.AttrGKEIdentityProvider, url)
	}
	if !hasPool {
		pool = m[1] + ".svc.id.goog"
	}
	return "identitynamespace:" + pool + ":" + url, true, nil
}

// kubernetesServiceAccount names the pod's service account from the kubelet's keys.
func kubernetesServiceAccount(attrs map[string]string) string {
	ns, name := attrs[contract.CtxPodNamespace], attrs[contract.CtxSAName]
	if name == "" {
		name = "default"
	}
	if ns == "" {
		return "Kubernetes service account " + name
	}
	return "Kubernetes service account " + ns + "/" + name
}

// externalAccount is the external_account credential configuration gcsfuse reads
// (cloud.google.com/go/auth: credentials.DetectDefault with CredentialsFile).
type externalAccount struct {
	Type             string     `json:"type"`
	Audience         string     `json:"audience"`
	SubjectTokenType string     `json:"subject_token_type"`
	TokenURL         string     `json:"token_url"`
	CredentialSource fileSource `json:"credential_source"`
	ImpersonationURL string     `json:"service_account_impersonation_url,omitempty"`
	UniverseDomain   string     `json:"universe_domain"`
}

type fileSource struct {
	File   string     `json:"file"`
	Format fileFormat `json:"format"`
}

type fileFormat struct {
	Type string `json:"type"`
}

// serviceAccountToken picks the token for audience from the kubelet's
// csi.storage.k8s.io/serviceAccount.tokens ({"<audience>": {"token", "expirationTimestamp"}}).
// Its errors never quote the value.
func serviceAccountToken(attrs map[string]string, audience string) ([]byte, time.Time, error) {
	raw, ok := attrs[contract.CtxSATokens]
	if !ok || raw == "" {
		return nil, time.Time{}, &missingToken{fmt.Sprintf("the kubelet passed no service account token: the driver's CSIDriver object needs tokenRequests with audience %q (the chart's tokenRequest.audience)",
			audience)}
	}
	if len(raw) > 4*maxTokenBytes {
		return nil, time.Time{}, errors.New("the kubelet's service account tokens are too large")
	}
	var toks map[string]struct {
		Token               string    `json:"token"`
		ExpirationTimestamp time.Time `json:"expirationTimestamp"`
	}
	if json.Unmarshal([]byte(raw), &toks) != nil {
		return nil, time.Time{}, fmt.Errorf("the kubelet's %s is not the expected JSON", contract.CtxSATokens)
	}
	t, ok := toks[audience]
	if !ok {
		auds := make([]string, 0, len(toks))
		for a := range toks {
			auds = append(auds, fmt.Sprintf("%q", a))
		}
		sort.Strings(auds)
		return nil, time.Time{}, &missingToken{fmt.Sprintf("the kubelet passed service account tokens for audiences [%s] but not %q: add it to the tokenRequests of the driver's CSIDriver object",
			strings.Join(auds, ", "), audience)}
	}
	if t.Token == "" || len(t.Token) > maxTokenBytes || !tokenPattern.MatchString(t.Token) {
		return nil, time.Time{}, fmt.Errorf("the kubelet's service account token for audience %q is empty, too large or not a JWT", audience)
	}
	return []byte(t.Token), t.ExpirationTimestamp, nil
}

// missingToken: the kubelet gave no token for the audience (the CSIDriver's tokenRequests).
type missingToken struct{ msg string }

func (e *missingToken) Error() string { return e.msg }

// serviceAccountKey is a Google service account key file, field by field: a field not
// listed here refuses the key (allowlist).
type serviceAccountKey struct {
	Type                    string `json:"type"`
	ProjectID               string `json:"project_id,omitempty"`
	PrivateKeyID            string `json:"private_key_id"`
	PrivateKey              string `json:"private_key"`
	ClientEmail             string `json:"client_email"`
	ClientID                string `json:"client_id,omitempty"`
	AuthURI                 string `json:"auth_uri,omitempty"`
	TokenURI                string `json:"token_uri,omitempty"`
	AuthProviderX509CertURL string `json:"auth_provider_x509_cert_url,omitempty"`
	ClientX509CertURL       string `json:"client_x509_cert_url,omitempty"`
	UniverseDomain          string `json:"universe_domain,omitempty"`
}

// keyFile is what gcsfuse gets: only the fields its 2-legged OAuth flow uses.
type keyFile struct {
	Type           string `json:"type"`
	ProjectID      string `json:"project_id,omitempty"`
	PrivateKeyID   string `json:"private_key_id"`
	PrivateKey     string `json:"private_key"`
	ClientEmail    string `json:"client_email"`
	ClientID       string `json:"client_id,omitempty"`
	TokenURI       string `json:"token_uri"`
	UniverseDomain string `json:"universe_domain"`
}

var projectIDPattern = lazyre.New(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)

func buildKey(cfg Config, req Request, fail func(identity, format string, args ...any) (*Plan, error)) (*Plan, error) {
	raw, ok := req.Secrets[contract.SecretKeyServiceAccount]
	if !ok {
		keys := make([]string, 0, len(req.Secrets))
		for k := range req.Secrets {
			keys = append(keys, fmt.Sprintf("%q", k))
		}
		sort.Strings(keys)
		return fail("", "the volume's nodePublishSecretRef Secret has no key %q (it has %s): put the service account key (JSON) there",
			contract.SecretKeyServiceAccount, strings.Join(keys, ", "))
	}
	if len(raw) > maxKeyBytes {
		return fail("", "the service account key in the Secret is larger than %d bytes", maxKeyBytes)
	}
	var k serviceAccountKey
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil || dec.More() {
		// The decoder's message may quote part of the key: say where, not what.
		field := ""
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			field = " (field " + ute.Field + ")"
		} else if err != nil && strings.HasPrefix(err.Error(), "json: unknown field ") {
			field = " (" + strings.TrimPrefix(err.Error(), "json: ") + ")"
		}
		return fail("", "the Secret's %s is not a service account key%s: want the JSON that gcloud iam service-accounts keys create writes",
			contract.SecretKeyServiceAccount, field)
	}
	if k.Type != "service_account" {
		return fail("", "the Secret's %s has type %q: only service_account keys are accepted", contract.SecretKeyServiceAccount, k.Type)
	}
	if !serviceAccountPattern.MatchString(k.ClientEmail) {
		return fail("", "the Secret's %s has client_email %q: want NAME@PROJECT.iam.gserviceaccount.com", contract.SecretKeyServiceAccount, k.ClientEmail)
	}
	identity := "service account " + k.ClientEmail
	if !keyIDPattern.MatchString(k.PrivateKeyID) {
		return fail(identity, "the Secret's %s has no valid private_key_id", contract.SecretKeyServiceAccount)
	}
	identity += " (key " + k.PrivateKeyID + ")"
	if k.ProjectID != "" && !projectIDPattern.MatchString(k.ProjectID) {
		return fail(identity, "the Secret's %s has project_id %q: not a project ID", contract.SecretKeyServiceAccount, k.ProjectID)
	}
	if k.ClientID != "" && !keyIDPattern.MatchString(k.ClientID) {
		return fail(identity, "the Secret's %s has an invalid client_id", contract.SecretKeyServiceAccount)
	}
	if k.UniverseDomain != "" && k.UniverseDomain != universeDomain {
		return fail(identity, "the Secret's %s has universe_domain %q: only %s is supported", contract.SecretKeyServiceAccount, k.UniverseDomain, universeDomain)
	}
	if k.TokenURI == "" {
		k.TokenURI = DefaultKeyTokenURI
	}
	if !slices.Contains(cfg.KeyTokenURIs, k.TokenURI) {
		return fail(identity, "the Secret's %s has token_uri %q, which is not one of the node plugin's (%s)", contract.SecretKeyServiceAccount,
			k.TokenURI, strings.Join(cfg.KeyTokenURIs, ", "))
	}
	if !validRSAKey(k.PrivateKey) {
		return fail(identity, "the Secret's %s has no valid private_key (want an RSA key in PEM)", contract.SecretKeyServiceAccount)
	}
	out := keyFile{Type: k.Type, ProjectID: k.ProjectID, PrivateKeyID: k.PrivateKeyID, PrivateKey: k.PrivateKey,
		ClientEmail: k.ClientEmail, ClientID: k.ClientID, TokenURI: k.TokenURI, UniverseDomain: universeDomain}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fail(identity, "encode the key file: %v", err)
	}
	return &Plan{Kind: KindKey, Identity: identity, Config: buf.Bytes()}, nil
}

// validRSAKey reports whether s is one PEM block holding an RSA private key (PKCS#8, as
// Google issues them, or PKCS#1), which is what the 2-legged OAuth flow signs with.
func validRSAKey(s string) bool {
	block, rest := pem.Decode([]byte(s))
	if block == nil || len(bytes.TrimSpace(rest)) != 0 {
		return false
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		_, ok := k.(*rsa.PrivateKey)
		return ok
	}
	_, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	return err == nil
}
