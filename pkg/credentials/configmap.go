package credentials

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/lazyre"
)

// A pod's credential ConfigMap (the GKE driver's gke-gcsfuse/workload-identity-credential-configmap
// annotation, ours under contract.AnnotationCredentialConfigMap): an external_account
// credential configuration, as `gcloud iam workload-identity-pools create-cred-config` writes
// it, that the pod's sidecar gives every gcsfuse of the pod without an identity of its own,
// with the pod's own service account token projected where the configuration reads it. It is
// how clusters off GKE give Workload Identity Federation to the GKE driver today; this
// driver's own way (a provider on the volume or the node plugin, the kubelet's token) needs
// no ConfigMap. The webhook reads and checks it at admission (ParseCredentialConfigMap) and
// writes what it checked, re-encoded from the members understood (CredentialConfig.JSON),
// into the sidecar's environment, which the pod's spec freezes: an edit or a deletion of
// the ConfigMap after admission changes nothing of a pod made before. The sidecar checks
// it again (ParseCredentialConfig) before gcsfuse reads it.

// maxCredentialConfig bounds the configuration's size: create-cred-config writes well under
// 1 KiB.
const maxCredentialConfig = 16 << 10

// CredentialConfigTokenSeconds is how long the projected token lives: the kubelet renews it
// at 80 % of that, and gcsfuse reads the file at each exchange.
const CredentialConfigTokenSeconds = 3600

var (
	// configMapAudiencePattern is the audiences a credential ConfigMap may exchange for: a
	// Workload Identity pool provider or a GKE cluster's identity namespace (providerPattern),
	// or a fleet membership's identity namespace (GKE Enterprise clusters off Google Cloud).
	configMapAudiencePattern = lazyre.New(providerPattern.String() + `|` +
		`^identitynamespace:[a-z][a-z0-9-]{4,28}[a-z0-9]\.svc\.id\.goog:https://gkehub\.googleapis\.com/projects/[a-z0-9-]{1,63}/locations/global/memberships/[a-z0-9-]{1,63}$`)
	// identityNamespacePool is the pool of an identity namespace audience.
	identityNamespacePool = lazyre.New(`^identitynamespace:([^:]+):`)
	// configFileName is a file name the kubelet can project a key to.
	configFileName = lazyre.New(`^[A-Za-z0-9._-]{1,253}$`)
)

// The subject token types an external_account configuration may give for a Kubernetes token.
var subjectTokenTypes = []string{"urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token"}

// configKeys are the members of an external_account configuration that are understood;
// any other is refused, so that nothing in it is silently ignored (a credential_source.url
// or .executable, a workforce pool, would make gcsfuse read as someone else than the checks
// say).
var configKeys = []string{"type", "audience", "subject_token_type", "token_url", "token_info_url",
	"service_account_impersonation_url", "service_account_impersonation", "credential_source",
	"universe_domain", "quota_project_id"}

// CredentialConfig is a pod's credential ConfigMap, checked.
type CredentialConfig struct {
	// Key is the ConfigMap's one data key, the file name the configuration is projected as.
	Key string
	// Audience is the STS audience (the provider); TokenAudience the audience of the pod's
	// projected token: a provider's default allowed audience ("https:" and the provider's
	// name), or an identity namespace's pool.
	Audience, TokenAudience string
	// TokenPath is credential_source.file, where the token is projected (its directory is
	// the sidecar's mount of the token's volume).
	TokenPath string
	// JSON is the configuration as checked, re-encoded from the members understood: what
	// the sidecar is given and gcsfuse reads.
	JSON []byte
	// ServiceAccount is the Google service account impersonated ("" none), for messages.
	ServiceAccount string
}

// TokenDir is the directory the token's volume is mounted at.
func (c CredentialConfig) TokenDir() string { return path.Dir(c.TokenPath) }

// TokenFile is the token's name in its volume.
func (c CredentialConfig) TokenFile() string { return path.Base(c.TokenPath) }

// Identity names who reads through the configuration, for messages.
func (c CredentialConfig) Identity(configMap string) string {
	who := "the pod's service account, exchanged at " + c.Audience
	if c.ServiceAccount != "" {
		who += ", impersonating " + c.ServiceAccount
	}
	return who + " (credential ConfigMap " + configMap + ")"
}

// CredentialRules are what a credential configuration may name beyond its own checks.
type CredentialRules struct {
	// Reserved are the directories the token may not be projected under or over (the
	// sidecar's own mounts).
	Reserved []string
	// TokenURLs are the STS endpoints taken besides Google's (https://sts.googleapis.com/v1/token):
	// the webhook's --credential-token-urls, for an STS of its own (an emulator's).
	TokenURLs []string
	// AnyTokenURL takes any http(s) STS endpoint: the sidecar's check of what the webhook
	// checked (a pod's creator could name any endpoint for the pod's own token anyway).
	AnyTokenURL bool
}

// googleTokenURL is Google's STS token endpoint, and googleTokenInfoURL its introspection.
const (
	googleTokenURL     = "https://sts." + universeDomain + "/v1/token"
	googleTokenInfoURL = "https://sts." + universeDomain + "/v1/introspect"
)

// tokenDirs are where a credential configuration's token may be projected: the run
// directories, which images leave empty, outside the service account's own mount.
var (
	tokenDirs        = []string{"/var/run/", "/run/"}
	tokenDirsRefused = []string{"/var/run/secrets/kubernetes.io", "/run/secrets/kubernetes.io"}
)

// ParseCredentialConfigMap checks the data of credential ConfigMap name as the GKE driver
// takes it (exactly one entry, an external_account configuration in JSON) and against what
// this driver can honour (ParseCredentialConfig). Its errors name the ConfigMap and say what
// to change.
func ParseCredentialConfigMap(name string, data map[string]string, binary map[string][]byte, rules CredentialRules) (CredentialConfig, error) {
	if len(binary) > 0 || len(data) != 1 {
		return CredentialConfig{}, fmt.Errorf("credential ConfigMap %s: must hold exactly one data entry, the external_account credential configuration (gcloud iam workload-identity-pools create-cred-config); it has %d data and %d binaryData entries", name, len(data), len(binary))
	}
	var key, raw string
	for k, v := range data {
		key, raw = k, v
	}
	if !configFileName.MatchString(key) || strings.HasPrefix(key, "..") {
		return CredentialConfig{}, fmt.Errorf("credential ConfigMap %s: key %q is not a file name", name, key)
	}
	c, err := ParseCredentialConfig(name+" key "+key, []byte(raw), rules)
	c.Key = key
	return c, err
}

// ParseCredentialConfig checks one external_account configuration, from the credential
// ConfigMap what names: every member understood (configKeys), a Workload Identity audience,
// a JWT subject token from a file projected under a run directory (tokenDirs), Google's STS
// (or one of rules'), Google's impersonation endpoint. It returns the configuration
// re-encoded from what it checked (JSON), so that nothing unchecked reaches gcsfuse.
func ParseCredentialConfig(what string, raw []byte, rules CredentialRules) (CredentialConfig, error) {
	bad := func(format string, args ...any) (CredentialConfig, error) {
		return CredentialConfig{}, fmt.Errorf("credential ConfigMap %s: "+format, append([]any{what}, args...)...)
	}
	if len(raw) > maxCredentialConfig {
		return bad("%d bytes, more than %d", len(raw), maxCredentialConfig)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return bad("not a JSON object: %v", err)
	}
	var unknown []string
	for k := range members {
		if !slices.Contains(configKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return bad("%s not supported (understood: %s)", strings.Join(unknown, ", "), strings.Join(configKeys, ", "))
	}
	var conf configMapAccount
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&conf); err != nil {
		return bad("%v", err)
	}
	switch {
	case conf.Type != "external_account":
		return bad("type %q, want external_account", conf.Type)
	case !configMapAudiencePattern.MatchString(conf.Audience):
		return bad("audience %q is not a Workload Identity pool provider (//iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER) or an identity namespace", conf.Audience)
	case !slices.Contains(subjectTokenTypes, conf.SubjectTokenType):
		return bad("subject_token_type %q, want one of %s", conf.SubjectTokenType, strings.Join(subjectTokenTypes, ", "))
	case conf.UniverseDomain != "" && conf.UniverseDomain != universeDomain:
		return bad("universe_domain %q, only %s is supported", conf.UniverseDomain, universeDomain)
	case conf.TokenInfoURL != "" && conf.TokenInfoURL != googleTokenInfoURL:
		return bad("token_info_url %q: only %s", conf.TokenInfoURL, googleTokenInfoURL)
	case conf.Impersonation != nil && conf.Impersonation.TokenLifetimeSeconds != 0 && (conf.Impersonation.TokenLifetimeSeconds < 600 || conf.Impersonation.TokenLifetimeSeconds > 43200):
		return bad("service_account_impersonation.token_lifetime_seconds %d: want 600 to 43200 (absent: 3600)", conf.Impersonation.TokenLifetimeSeconds)
	case conf.QuotaProjectID != "" && !quotaProject.MatchString(conf.QuotaProjectID):
		return bad("quota_project_id %q is not a project ID or number", conf.QuotaProjectID)
	}
	switch {
	case conf.TokenURL == googleTokenURL || slices.Contains(rules.TokenURLs, conf.TokenURL):
	case rules.AnyTokenURL && checkHTTPURL(conf.TokenURL) == nil:
	default:
		return bad("token_url %q: only %s (or an STS the webhook's --credential-token-urls names)", conf.TokenURL, googleTokenURL)
	}
	c := CredentialConfig{Audience: conf.Audience, TokenAudience: "https:" + conf.Audience}
	if m := identityNamespacePool.FindStringSubmatch(conf.Audience); m != nil {
		c.TokenAudience = m[1]
	}
	if conf.ImpersonationURL != "" {
		m := impersonationURL.FindStringSubmatch(conf.ImpersonationURL)
		if m == nil {
			return bad("service_account_impersonation_url %q: want https://iamcredentials.%s/v1/projects/-/serviceAccounts/EMAIL:generateAccessToken", conf.ImpersonationURL, universeDomain)
		}
		c.ServiceAccount = m[1]
	}
	src := conf.CredentialSource
	switch {
	case src == nil || src.File == "":
		return bad("credential_source must be an object with file, the path of the pod's token (no url, executable or environment_id)")
	case src.URL != nil || src.Executable != nil || src.EnvironmentID != nil || src.Headers != nil:
		return bad("credential_source: only file is supported: the token comes from a file the pod's service account token is projected to")
	case src.Format != nil && src.Format.Type != "" && src.Format.Type != "text":
		return bad("credential_source.format: only {\"type\": \"text\"} is supported (the token file holds the token alone)")
	}
	c.TokenPath = src.File
	p := c.TokenPath
	base := path.Base(p)
	if !path.IsAbs(p) || path.Clean(p) != p || strings.HasPrefix(base, ".") ||
		slices.ContainsFunc(strings.Split(p[1:], "/"), func(e string) bool { return !configFileName.MatchString(e) }) ||
		!slices.ContainsFunc(tokenDirs, func(d string) bool { return strings.HasPrefix(p, d) && path.Dir(p)+"/" != d }) {
		return bad("credential_source.file %q must be a clean absolute path in a directory under %s (the token's volume is mounted at that directory)", p, strings.Join(tokenDirs, " or "))
	}
	for _, r := range append(slices.Clone(tokenDirsRefused), rules.Reserved...) {
		d := c.TokenDir()
		if d == r || strings.HasPrefix(d, r+"/") || strings.HasPrefix(r, d+"/") {
			return bad("credential_source.file %q: its directory cannot be mounted beside %s", p, r)
		}
	}
	// What gcsfuse reads: the members checked, and nothing else.
	out := configMapAccount{Type: conf.Type, Audience: conf.Audience, SubjectTokenType: conf.SubjectTokenType, TokenURL: conf.TokenURL,
		TokenInfoURL: conf.TokenInfoURL, ImpersonationURL: conf.ImpersonationURL, Impersonation: conf.Impersonation,
		UniverseDomain: conf.UniverseDomain, QuotaProjectID: conf.QuotaProjectID,
		CredentialSource: &credentialSource{File: src.File, Format: src.Format}}
	js, err := json.Marshal(out)
	if err != nil {
		return bad("%v", err)
	}
	// The kubelet expands $(VAR) in an environment value, where the sidecar gets this: a
	// "$" is written as JSON's \u0024, which it leaves alone.
	js = bytes.ReplaceAll(js, []byte("$"), []byte(`\u0024`))
	if len(js) > maxCredentialConfig {
		return bad("%d bytes once re-encoded, more than %d", len(js), maxCredentialConfig)
	}
	c.JSON = js
	return c, nil
}

// configMapAccount is the members of a credential ConfigMap's external_account
// configuration that this driver takes.
type configMapAccount struct {
	Type             string                 `json:"type"`
	Audience         string                 `json:"audience"`
	SubjectTokenType string                 `json:"subject_token_type"`
	TokenURL         string                 `json:"token_url"`
	TokenInfoURL     string                 `json:"token_info_url,omitempty"`
	ImpersonationURL string                 `json:"service_account_impersonation_url,omitempty"`
	Impersonation    *impersonationSettings `json:"service_account_impersonation,omitempty"`
	UniverseDomain   string                 `json:"universe_domain,omitempty"`
	QuotaProjectID   string                 `json:"quota_project_id,omitempty"`
	CredentialSource *credentialSource      `json:"credential_source"`
}

type impersonationSettings struct {
	TokenLifetimeSeconds int `json:"token_lifetime_seconds"`
}

type credentialSource struct {
	File   string        `json:"file,omitempty"`
	Format *sourceFormat `json:"format,omitempty"`
	// Refused when present.
	URL           json.RawMessage `json:"url,omitempty"`
	Executable    json.RawMessage `json:"executable,omitempty"`
	EnvironmentID json.RawMessage `json:"environment_id,omitempty"`
	Headers       json.RawMessage `json:"headers,omitempty"`
}

type sourceFormat struct {
	Type string `json:"type,omitempty"`
}

// quotaProject is a project ID or number.
var quotaProject = lazyre.New(`^([a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20})$`)

// impersonationURL is Google's impersonation endpoint; its group is the service account.
var impersonationURL = lazyre.New(`^https://iamcredentials\.googleapis\.com/v1/projects/-/serviceAccounts/([a-z0-9][a-z0-9-]{0,62}@[a-z0-9.-]{1,253}):generateAccessToken$`)

// CheckTokenURL reports whether raw can be a credential configuration's STS endpoint, as
// the sidecar checks it: an absolute http or https URL with a host and no user.
func CheckTokenURL(raw string) error { return checkHTTPURL(raw) }

// checkHTTPURL accepts an absolute http or https URL with a host and no user.
func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || strings.ContainsAny(raw, " \t\r\n") {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	return nil
}
