package credentials

import (
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

var reserved = []string{"/gcsfuse-tmp", "/etc/gcsfuse-csi/wif"}

// A credential ConfigMap as the GKE driver's users write it is taken: its provider, the
// token's audience (the provider's default, or an identity namespace's pool), where the
// token goes, and the service account it impersonates.
func TestParseCredentialConfigMap(t *testing.T) {
	c, err := ParseCredentialConfigMap("wif", map[string]string{"credential-configuration.json": credConfig}, nil, reserved)
	if err != nil {
		t.Fatal(err)
	}
	want := CredentialConfig{Key: "credential-configuration.json",
		Audience:      "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1",
		TokenAudience: "https://iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1",
		TokenPath:     "/var/run/service-account/token"}
	if c != want || c.TokenDir() != "/var/run/service-account" || c.TokenFile() != "token" {
		t.Errorf("got %+v, want %+v", c, want)
	}

	fleet := strings.Replace(credConfig, `"//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1"`,
		`"identitynamespace:fleet-proj.svc.id.goog:https://gkehub.googleapis.com/projects/fleet-proj/locations/global/memberships/onprem-1"`, 1)
	fleet = strings.Replace(fleet, `"token_info_url"`, `"service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/reader@proj-1.iam.gserviceaccount.com:generateAccessToken", "token_info_url"`, 1)
	c, err = ParseCredentialConfigMap("fleet", map[string]string{"config": fleet}, nil, reserved)
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
		{"no token URL", edit(`"token_url": "https://sts.googleapis.com/v1/token",`, ``), nil, "token_url: missing"},
		{"token URL scheme", edit(`https://sts.googleapis.com/v1/token`, `file:///etc/passwd`), nil, "token_url"},
		{"URL source", edit(`"file": "/var/run/service-account/token"`, `"url": "http://169.254.169.254/token"`), nil, "credential_source.url not supported"},
		{"executable source", edit(`"file": "/var/run/service-account/token"`, `"file": "/t/token", "executable": {"command": "sh"}`), nil, "credential_source.executable not supported"},
		{"JSON format", edit(`{"type": "text"}`, `{"type": "json", "subject_token_field_name": "t"}`), nil, "credential_source.format"},
		{"relative file", edit(`/var/run/service-account/token`, `token`), nil, "clean absolute path"},
		{"file at the root", edit(`/var/run/service-account/token`, `/token`), nil, "other than /"},
		{"unclean file", edit(`/var/run/service-account/token`, `/var/run/../token`), nil, "clean absolute path"},
		{"the sidecar's directory", edit(`/var/run/service-account/token`, `/gcsfuse-tmp/token`), nil, "beside the sidecar's /gcsfuse-tmp"},
		{"above the sidecar's directory", edit(`/var/run/service-account/token`, `/etc/gcsfuse-csi/token`), nil, "beside the sidecar's /etc/gcsfuse-csi/wif"},
	} {
		_, err := ParseCredentialConfigMap("wif", tc.data, tc.binary, reserved)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "credential ConfigMap wif") {
			t.Errorf("%s: %v, want an error naming the ConfigMap and %q", tc.name, err, tc.want)
		}
	}
}
