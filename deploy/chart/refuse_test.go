package chart

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBadValuesRefused: values the schema (values.schema.json) or a template's fail must
// refuse at install, with an error that names the value, rather than render manifests that
// break on the cluster.
func TestBadValuesRefused(t *testing.T) {
	pemFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(pemFile, []byte("-----BEGIN CERTIFICATE-----\nMIIBAA==\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		names string   // what the error must name
		args  []string // helm template arguments
	}{
		{"kubeletDir", []string{"--set", "kubeletDir=relative/path"}},
		{"failurePolicy", []string{"--set", "webhook.failurePolicy=Sometimes"}},
		{"replicas", []string{"--set", "webhook.replicas=0"}},
		{"maxUnavailable", []string{"--set", "webhook.podDisruptionBudget.maxUnavailable=0"}},
		{"driverName", []string{"--set", "driverName=efs.csi.aws.com"}},
		{"kind", []string{"--set", "webhook.tls.certManager.issuerRef.kind=Authority"}},
		{"duration", []string{"--set", "webhook.tls.certManager.duration=90days"}},
		{"pullPolicy", []string{"--set", "images.node.pullPolicy=Sometimes"}},
		{"machineType", []string{"--set", "node.machineType=a b"}},
		{"tag", []string{"--set", "images.node.tag=v1 --privileged"}},
		{"unknownValue", []string{"--set", "unknownValue=1"}},
		{"sidecarResources/requests/cpu", []string{"--set", "webhook.sidecarResources.requests.cpu=lots"}},
		{"gpu", []string{"--set", "webhook.sidecarResources.limits.gpu=1"}},
		{"pullSecrets", []string{"--set", "images.sidecar.pullSecrets={Bad_Name}"}},
		{"imagePullSecrets", []string{"--set", "imagePullSecrets[0].name=a b"}},
		{"audience", []string{"--set", "tokenRequest.audience=a b"}},
		{"port", []string{"--set", "webhook.port=443"}},
		{"profileClasses.bucket needs controller.enabled", []string{"--set", "profileClasses.bucket=team-bucket", "--set", "controller.enabled=false"}},
		{"bucket", []string{"--set", "profileClasses.bucket=Team Bucket"}},
		{"fileCacheCapacity", []string{"--set", "profileClasses.fileCacheCapacity=lots"}},
		{"fileCacheCapacity", []string{"--set-string", "profileClasses.fileCacheCapacity=-1"}},
		{"httpsProxy", []string{"--set", "proxy.httpsProxy=proxy.corp:3128"}},
		{"caBundle", []string{"--set", "caBundle=not-pem"}},
		{"set one", []string{"--set-file", "caBundle=" + pemFile, "--set", "caBundleConfigMap.name=corp-roots"}},
		{"priorityClassName", []string{"--set", "node.priorityQuota.create=true", "--set", "node.priorityClassName="}},
		{"controller/gcsAuth", []string{"--set", "controller.gcsAuth=key"}},
		{"controller/replicas", []string{"--set", "controller.replicas=0"}},
		{"controller/metricsPort", []string{"--set", "controller.metricsPort=80"}},
		{"controller/gcsEndpoint", []string{"--set", "controller.gcsEndpoint=storage.corp:443"}},
		{"controller/credentialsSecret/name", []string{"--set", "controller.credentialsSecret.name=Bad_Name"}},
		{"images/controller/tag", []string{"--set", "images.controller.tag=v1 --privileged"}},
		{"mounter/linger", []string{"--set", "mounter.linger=a minute"}},
		{"mounter/cacheSizeLimit", []string{"--set", "mounter.cacheSizeLimit=lots"}},
		{"mounter/terminationGracePeriodSeconds", []string{"--set", "mounter.terminationGracePeriodSeconds=-1"}},
		{"mounter': additional properties 'image'", []string{"--set", "mounter.image=other"}},
		{"mounter/linger", []string{"--set", "mounter.linger=60"}},
		{"mounter/memoryPerKey", []string{"--set", "mounter.memoryPerKey=512MB"}},
		{"mounter/memoryPerKey", []string{"--set", "mounter.memoryPerKey=64Mi"}},
		{"stands alone", []string{"--set", "mounter.adcNamespaces={*,batch}"}},
		{"set tokenRequest.audience", []string{"--set", "tokenRequest.audience=", "--set", "mounter.identityProvider=//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov"}},
		{"set tokenRequest.audience", []string{"--set", "tokenRequest.audience=", "--set", "node.wifProvider=//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov"}},
		{"node/wifProvider", []string{"--set", "node.wifProvider=https://sts.example.com"}},
		{"mounter/identityProvider", []string{"--set", "mounter.identityProvider=identitynamespace:p.svc.id.goog:https://container.googleapis.com/v1/projects/p/locations/l/clusters/c"}},
		{"mounter/identityProvider", []string{"--set", "mounter.identityProvider=https://sts.example.com"}},
		{"mounter/adcNamespaces/0", []string{"--set", "mounter.adcNamespaces={Team_A}"}},
		{"mounter/adcNamespaces/0", []string{"--set", "mounter.adcNamespaces={*team}"}},
	} {
		t.Run(tc.names, func(t *testing.T) {
			refused(t, regexp.MustCompile(regexp.QuoteMeta(tc.names)), tc.args...)
		})
	}
	// The admission policy on a cluster that cannot take it (Kubernetes < 1.30): refused at
	// install, saying what to set (--kube-version stands for the cluster's version).
	t.Run("admission policy on Kubernetes 1.29", func(t *testing.T) {
		refused(t, regexp.MustCompile(`Kubernetes >= 1\.30.*admissionPolicy\.enabled=false`), "--kube-version", "1.29.4")
	})
}

// refused fails t unless helm template with args fails and its error output matches want.
func refused(t *testing.T, want *regexp.Regexp, args ...string) {
	t.Helper()
	_, err := templateText(t, defaultNS, args...)
	var he *helmError
	switch {
	case err == nil:
		t.Errorf("%s: accepted; want an error matching /%s/", strings.Join(args, " "), want)
	case !errors.As(err, &he):
		t.Fatal(err)
	case !want.MatchString(he.Stderr):
		t.Errorf("refused, but helm's error does not match /%s/: %v", want, err)
	}
}
