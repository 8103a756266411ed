package credentials

import (
	"reflect"
	"strings"
	"testing"
)

// What `gcloud iam workload-identity-pools create-cred-config ... --credential-source-file
// /var/run/service-account/token --credential-source-type text` writes.
const credConfig = `{
  "universe_domain": "googleapis.com",
  "type": "external_account",
  "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1",
  "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
  "token_url": "https://sts.googleapis.com/v1/token",
  "credential_source": {"file": "/var/run/service-account/token", "format": {"type": "text"}},
  "token_info_url": "https://sts.googleapis.com/v1/introspect"
}`

var rules = CredentialRules{Reserved: []string{"/gcsfuse-tmp", "/run/gcsfuse-csi"}}

// A credential ConfigMap as the GKE driver's users write it is taken: its provider, the
// token's audience (the provider's default, or an identity namespace's pool), where the
// token goes, and the service account it impersonates.
func TestParseCredentialConfigMap(t *testing.T) {
	c, err := ParseCredentialConfigMap("wif", map[string]string{"credential-configuration.json": credConfig}, nil, rules)
	if err != nil {
		t.Fatal(err)
	}
	want := CredentialConfig{Key: "credential-configuration.json",
		Audience:      "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1",
		TokenAudience: "https://iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1",
		TokenPath:     "/var/run/service-account/token"}
	js := c.JSON
	c.JSON = nil
	if !reflect.DeepEqual(c, want) || c.TokenDir() != "/var/run/service-account" || c.TokenFile() != "token" {
		t.Errorf("got %+v, want %+v", c, want)
	}
	// What gcsfuse gets is what was checked, and passes the same checks again (the sidecar's).
	again, err := ParseCredentialConfig("wif", js, CredentialRules{AnyTokenURL: true, Reserved: rules.Reserved})
	if err != nil || again.Audience != want.Audience || again.TokenPath != want.TokenPath || string(again.JSON) != string(js) {
		t.Errorf("the re-encoded configuration %s: %+v, %v", js, again, err)
	}

	fleet := strings.Replace(credConfig, `"//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1"`,
		`"identitynamespace:fleet-proj.svc.id.goog:https://gkehub.googleapis.com/projects/fleet-proj/locations/global/memberships/onprem-1"`, 1)
	fleet = strings.Replace(fleet, `"token_info_url"`, `"service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/reader@proj-1.iam.gserviceaccount.com:generateAccessToken", "token_info_url"`, 1)
	c, err = ParseCredentialConfigMap("fleet", map[string]string{"config": fleet}, nil, rules)
	if err != nil {
		t.Fatal(err)
	}
	if c.TokenAudience != "fleet-proj.svc.id.goog" || c.ServiceAccount != "reader@proj-1.iam.gserviceaccount.com" {
		t.Errorf("fleet: token audience %q, service account %q", c.TokenAudience, c.ServiceAccount)
	}
	if id := c.Identity("fleet"); !strings.Contains(id, "reader@proj-1.iam.gserviceaccount.com") || !strings.Contains(id, "credential ConfigMap fleet") {
		t.Errorf("identity %q", id)
	}
}

// Whatever the sidecar could not honour, or would honour as another identity than the
// checks say, is refused with the ConfigMap's name and what is wrong.
func TestParseCredentialConfigMapRefused(t *testing.T) {
	edit := func(old, repl string) map[string]string {
		if !strings.Contains(credConfig, old) {
			t.Fatalf("%q not in the configuration", old)
		}
		return map[string]string{"c.json": strings.Replace(credConfig, old, repl, 1)}
	}
	for _, tc := range []struct {
		name   string
		data   map[string]string
		binary map[string][]byte
		want   string
	}{
		{"no entry", nil, nil, "exactly one data entry"},
		{"two entries", map[string]string{"a": credConfig, "b": credConfig}, nil, "exactly one data entry"},
		{"binary", map[string]string{"a": credConfig}, map[string][]byte{"b": nil}, "binaryData"},
		{"not JSON", map[string]string{"a": "type: external_account"}, nil, "not a JSON object"},
		{"too big", map[string]string{"a": strings.Repeat(" ", maxCredentialConfig+1)}, nil, "more than"},
		{"service account key", edit(`"external_account"`, `"service_account"`), nil, `type "service_account", want external_account`},
		{"unknown member", edit(`"token_info_url"`, `"workforce_pool_user_project": "p", "token_info_url"`), nil, "workforce_pool_user_project not supported"},
		{"bad audience", edit(`providers/k8s-1"`, `providers/k8s-1/x"`), nil, "is not a Workload Identity pool provider"},
		{"subject token type", edit(`token-type:jwt`, `token-type:saml2`), nil, "subject_token_type"},
		{"universe", edit(`"universe_domain": "googleapis.com"`, `"universe_domain": "example.com"`), nil, "universe_domain"},
		{"no token URL", edit(`"token_url": "https://sts.googleapis.com/v1/token",`, ``), nil, `token_url ""`},
		{"token URL scheme", edit(`https://sts.googleapis.com/v1/token`, `file:///etc/passwd`), nil, "token_url"},
		{"another STS", edit(`https://sts.googleapis.com/v1/token`, `http://evil.example/token`), nil, "only https://sts.googleapis.com/v1/token"},
		{"token info URL", edit(`https://sts.googleapis.com/v1/introspect`, `file:///etc/passwd`), nil, "token_info_url"},
		{"impersonation elsewhere", edit(`"token_info_url"`, `"service_account_impersonation_url": "https://evil.example/v1/projects/-/serviceAccounts/a@b.iam.gserviceaccount.com:generateAccessToken", "token_info_url"`), nil, "service_account_impersonation_url"},
		{"impersonation lifetime", edit(`"token_info_url"`, `"service_account_impersonation": {"token_lifetime_seconds": 1}, "token_info_url"`), nil, "token_lifetime_seconds"},
		{"URL source", edit(`"file": "/var/run/service-account/token"`, `"url": "http://169.254.169.254/token"`), nil, "credential_source must be an object with file"},
		{"executable source", edit(`"file": "/var/run/service-account/token"`, `"file": "/var/run/t/token", "executable": {"command": "sh"}`), nil, "only file is supported"},
		{"unknown source member", edit(`"file": "/var/run/service-account/token"`, `"file": "/var/run/t/token", "regional_cred_verification_url": "x"`), nil, "unknown field"},
		{"JSON format", edit(`{"type": "text"}`, `{"type": "json", "subject_token_field_name": "t"}`), nil, "unknown field"},
		{"relative file", edit(`/var/run/service-account/token`, `token`), nil, "clean absolute path"},
		{"file in /var/run itself", edit(`/var/run/service-account/token`, `/var/run/token`), nil, "directory under /var/run/"},
		{"unclean file", edit(`/var/run/service-account/token`, `/var/run/../token`), nil, "clean absolute path"},
		{"proc", edit(`/var/run/service-account/token`, `/proc/self/token`), nil, "directory under /var/run/"},
		{"the CA bundle's directory", edit(`/var/run/service-account/token`, `/etc/ssl/certs/token`), nil, "directory under /var/run/"},
		{"the service account's mount", edit(`/var/run/service-account/token`, `/var/run/secrets/kubernetes.io/serviceaccount/token`), nil, "beside /var/run/secrets/kubernetes.io"},
		{"a dot file", edit(`/var/run/service-account/token`, `/var/run/service-account/..data`), nil, "clean absolute path"},
		{"quota project", edit(`"token_info_url"`, `"quota_project_id": "<script>", "token_info_url"`), nil, "quota_project_id"},
		{"a variable in the path", edit(`/var/run/service-account/token`, `/var/run/$(GCSFUSE_POD_NAME)/token`), nil, "clean absolute path"},
		{"a reserved directory", edit(`/var/run/service-account/token`, `/run/gcsfuse-csi/token`), nil, "beside /run/gcsfuse-csi"},
	} {
		_, err := ParseCredentialConfigMap("wif", tc.data, tc.binary, rules)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "credential ConfigMap wif") {
			t.Errorf("%s: %v, want an error naming the ConfigMap and %q", tc.name, err, tc.want)
		}
	}
}

// A "$" never reaches the sidecar's environment as one (the kubelet would expand $(VAR));
// an impersonation without a lifetime takes the default; a project ID is taken.
func TestParseCredentialConfigEncoding(t *testing.T) {
	conf := strings.Replace(credConfig, `"token_info_url"`, `"quota_project_id": "proj-1", "service_account_impersonation": {}, "token_info_url"`, 1)
	if _, err := ParseCredentialConfig("wif", []byte(conf), CredentialRules{}); err != nil {
		t.Fatal(err)
	}
	dollar := strings.Replace(conf, "https://sts.googleapis.com/v1/token", "https://sts.example.com/$(X)/token", 1)
	c, err := ParseCredentialConfig("wif", []byte(dollar), CredentialRules{TokenURLs: []string{"https://sts.example.com/$(X)/token"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(c.JSON), "$") || !strings.Contains(string(c.JSON), `\u0024(X)`) || !strings.Contains(string(c.JSON), `"quota_project_id":"proj-1"`) {
		t.Errorf("re-encoded %s", c.JSON)
	}
	again, err := ParseCredentialConfig("wif", c.JSON, CredentialRules{AnyTokenURL: true})
	if err != nil || !strings.Contains(string(again.JSON), `\u0024(X)`) {
		t.Errorf("the sidecar's check of %s: %v", c.JSON, err)
	}
}
