package credentials

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
)

// A pod's credential ConfigMap (the GKE driver's gke-gcsfuse/workload-identity-credential-configmap
// annotation, ours under contract.AnnotationCredentialConfigMap): an external_account
// credential configuration, as `gcloud iam workload-identity-pools create-cred-config` writes
// it, that the pod's sidecar gives every gcsfuse of the pod without an identity of its own,
// with the pod's own service account token projected where the configuration reads it. It is
// how clusters off GKE give Workload Identity Federation to the GKE driver today; this
// driver's own way (a provider on the volume or the node plugin, the kubelet's token) needs
// no ConfigMap. The webhook reads and checks it at admission (ParseCredentialConfigMap):
// what the sidecar is given is what was checked.

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
	configMapAudiencePattern = regexp.MustCompile(providerPattern.String() + `|` +
		`^identitynamespace:[a-z][a-z0-9-]{4,28}[a-z0-9]\.svc\.id\.goog:https://gkehub\.googleapis\.com/projects/[a-z0-9-]{1,63}/locations/global/memberships/[a-z0-9-]{1,63}$`)
	// identityNamespacePool is the pool of an identity namespace audience.
	identityNamespacePool = regexp.MustCompile(`^identitynamespace:([^:]+):`)
	// configFileName is a file name the kubelet can project a key to.
	configFileName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,253}$`)
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

// ParseCredentialConfigMap checks the data of credential ConfigMap name as the GKE driver
// takes it (exactly one entry, an external_account configuration in JSON) and against what
// this driver can honour; reserved are the paths the token may not be projected under (the
// sidecar's own mounts). Its errors name the ConfigMap and say what to change.
func ParseCredentialConfigMap(name string, data map[string]string, binary map[string][]byte, reserved []string) (CredentialConfig, error) {
	bad := func(format string, args ...any) (CredentialConfig, error) {
		return CredentialConfig{}, fmt.Errorf("credential ConfigMap %s: "+format, append([]any{name}, args...)...)
	}
	if len(binary) > 0 || len(data) != 1 {
		return bad("must hold exactly one data entry, the external_account credential configuration (gcloud iam workload-identity-pools create-cred-config); it has %d data and %d binaryData entries", len(data), len(binary))
	}
	var key, raw string
	for k, v := range data {
		key, raw = k, v
	}
	if !configFileName.MatchString(key) {
		return bad("key %q is not a file name", key)
	}
	if len(raw) > maxCredentialConfig {
		return bad("key %s: %d bytes, more than %d", key, len(raw), maxCredentialConfig)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &members); err != nil {
		return bad("key %s is not a JSON object: %v", key, err)
	}
	var unknown []string
	for k := range members {
		if !slices.Contains(configKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return bad("key %s: %s not supported (understood: %s)", key, strings.Join(unknown, ", "), strings.Join(configKeys, ", "))
	}
	var conf struct {
		Type             string          `json:"type"`
		Audience         string          `json:"audience"`
		SubjectTokenType string          `json:"subject_token_type"`
		TokenURL         string          `json:"token_url"`
		ImpersonationURL string          `json:"service_account_impersonation_url"`
		UniverseDomain   string          `json:"universe_domain"`
		CredentialSource json.RawMessage `json:"credential_source"`
	}
	if err := json.Unmarshal([]byte(raw), &conf); err != nil {
		return bad("key %s: %v", key, err)
	}
	switch {
	case conf.Type != "external_account":
		return bad("key %s: type %q, want external_account", key, conf.Type)
	case !configMapAudiencePattern.MatchString(conf.Audience):
		return bad("key %s: audience %q is not a Workload Identity pool provider (//iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER) or an identity namespace", key, conf.Audience)
	case !slices.Contains(subjectTokenTypes, conf.SubjectTokenType):
		return bad("key %s: subject_token_type %q, want one of %s", key, conf.SubjectTokenType, strings.Join(subjectTokenTypes, ", "))
	case conf.UniverseDomain != "" && conf.UniverseDomain != universeDomain:
		return bad("key %s: universe_domain %q, only %s is supported", key, conf.UniverseDomain, universeDomain)
	}
	if err := checkHTTPURL(conf.TokenURL, true); err != nil {
		return bad("key %s: token_url: %v", key, err)
	}
	if err := checkHTTPURL(conf.ImpersonationURL, false); err != nil {
		return bad("key %s: service_account_impersonation_url: %v", key, err)
	}
	c := CredentialConfig{Key: key, Audience: conf.Audience, TokenAudience: "https:" + conf.Audience}
	if m := identityNamespacePool.FindStringSubmatch(conf.Audience); m != nil {
		c.TokenAudience = m[1]
	}
	if conf.ImpersonationURL != "" {
		if m := impersonationEmail.FindStringSubmatch(conf.ImpersonationURL); m != nil {
			c.ServiceAccount = m[1]
		}
	}
	var source map[string]json.RawMessage
	if err := json.Unmarshal(conf.CredentialSource, &source); err != nil || source == nil {
		return bad("key %s: credential_source must be an object with file, the path of the pod's token", key)
	}
	for k := range source {
		if k != "file" && k != "format" {
			return bad("key %s: credential_source.%s not supported: the token comes from a file the pod's service account token is projected to (credential_source.file)", key, k)
		}
	}
	if f, ok := source["format"]; ok {
		var format struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(f, &format); err != nil || (format.Type != "" && format.Type != "text") {
			return bad("key %s: credential_source.format: only {\"type\": \"text\"} is supported (the token file holds the token alone)", key)
		}
	}
	if err := json.Unmarshal(source["file"], &c.TokenPath); err != nil || c.TokenPath == "" {
		return bad("key %s: credential_source.file must be the path of the pod's token", key)
	}
	p := c.TokenPath
	if !path.IsAbs(p) || path.Clean(p) != p || path.Dir(p) == "/" || !configFileName.MatchString(path.Base(p)) {
		return bad("key %s: credential_source.file %q must be a clean absolute path in a directory other than / (the token's volume is mounted at its directory)", key, p)
	}
	for _, r := range reserved {
		d := c.TokenDir()
		if d == r || strings.HasPrefix(d, r+"/") || strings.HasPrefix(r, d+"/") {
			return bad("key %s: credential_source.file %q: its directory cannot be mounted beside the sidecar's %s", key, p, r)
		}
	}
	return c, nil
}

// impersonationEmail finds the service account in an impersonation URL.
var impersonationEmail = regexp.MustCompile(`/serviceAccounts/([^/:]+):generateAccessToken$`)

// checkHTTPURL accepts an absolute http or https URL with a host ("" when not required).
func checkHTTPURL(raw string, required bool) error {
	if raw == "" {
		if required {
			return fmt.Errorf("missing")
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || strings.ContainsAny(raw, " \t\r\n") {
		return fmt.Errorf("%q is not an http(s) URL", raw)
	}
	return nil
}
