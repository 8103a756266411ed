package chart

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestWebhookRBAC checks the webhook's ClusterRole: exactly what it reads (the template says
// why each rule), nothing it writes, granted to its own ServiceAccount alone.
func TestWebhookRBAC(t *testing.T) {
	r := render(t, otherNS)
	wantRules(t, only[*rbacv1.ClusterRole](t, r, webhookName).Rules, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get"}},
		// get: a bound claim's volume; list and watch: the cache of the volumes pre-bound by
		// their claimRef to a claim not bound yet.
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"resourcequotas", "limitranges"}, Verbs: []string{"list", "watch"}},
		// get, never list or watch: the one ConfigMap a pod names as its credentials.
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
	})
	sa := only[*corev1.ServiceAccount](t, r, webhookName)
	b := only[*rbacv1.ClusterRoleBinding](t, r, webhookName)
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != webhookName || b.RoleRef.APIGroup != rbacv1.GroupName {
		t.Errorf("roleRef %+v, want ClusterRole %s", b.RoleRef, webhookName)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != rbacv1.ServiceAccountKind || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != otherNS {
		t.Errorf("subjects %+v, want the ServiceAccount %s/%s", b.Subjects, otherNS, sa.Name)
	}
}

// TestWebhookCredentialConfigMaps: webhook.credentialConfigMaps=false takes the webhook's
// ConfigMap rule away and tells it to refuse such pods; credentialTokenURLs and extraEnv
// reach its container.
func TestWebhookCredentialConfigMaps(t *testing.T) {
	refuteArg(t, webhookContainer(t, render(t, otherNS)), "--credential-")
	r := render(t, otherNS, "--set", "webhook.credentialConfigMaps=false")
	for _, rule := range only[*rbacv1.ClusterRole](t, r, webhookName).Rules {
		for _, res := range rule.Resources {
			if res == "configmaps" {
				t.Errorf("rule %+v with credentialConfigMaps false", rule)
			}
		}
	}
	wantArg(t, webhookContainer(t, r), "--credential-configmaps=false")
	r = render(t, otherNS, "--set", "webhook.credentialTokenURLs={http://$(NODE_IP):14443/sts/v1/token}",
		"--set", "webhook.extraEnv[0].name=NODE_IP", "--set", "webhook.extraEnv[0].valueFrom.fieldRef.fieldPath=status.hostIP")
	c := webhookContainer(t, r)
	wantArg(t, c, "--credential-token-urls=http://$(NODE_IP):14443/sts/v1/token")
	if len(c.Env) != 1 || c.Env[0].Name != "NODE_IP" || c.Env[0].ValueFrom == nil {
		t.Errorf("env %+v, want NODE_IP from extraEnv", c.Env)
	}
}
