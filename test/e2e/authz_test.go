package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitcoord"
)

// nodeScopedMinVersion is the first release whose structured authorization configuration
// (apiserver.config.k8s.io/v1) hack/cluster-up.sh uses, with field selectors passed to the
// authorizers by default.
var nodeScopedMinVersion = version.MajorMinor(1, 32)

// TestNodeScopedReads: with deploy/authorization/node-scoped-reads.yaml in the API server
// (hack/cluster-up.sh from 1.32), the node plugin's service account, with a token bound to
// the node plugin's pod as the kubelet gives it, reads the pods of its own node (list and
// watch with spec.nodeName, the form of every read it makes) and nothing else: not every
// pod, not another node's, no get. The rest of the suite, which needs the node plugin's
// reads, runs under the same configuration.
func TestNodeScopedReads(t *testing.T) {
	if !version.MajorMinor(kubeletVersion.Major(), kubeletVersion.Minor()).AtLeast(nodeScopedMinVersion) {
		t.Skipf("cluster v%s: hack/cluster-up.sh configures node-scoped reads from %s", kubeletVersion, nodeScopedMinVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	plugin := nodePluginPod(t)
	tr, err := cs.CoreV1().ServiceAccounts(plugin.Namespace).CreateToken(ctx, plugin.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr(int64(600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: plugin.Name, UID: plugin.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", plugin.Spec.ServiceAccountName, err)
	}
	admin, err := clientcmd.BuildConfigFromFlags("", suite.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node := plugin.Spec.NodeName
	pods := as.CoreV1().Pods(ns)
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want allowed", what, err)
		}
	}
	// Refused by the configuration's entry, whose endpoint never answers, so the API server
	// reports the authorizer's error (500 naming that endpoint); or by RBAC (403).
	denied := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) && !(apierrors.IsInternalError(err) && strings.Contains(err.Error(), "127.0.0.1:1")) {
			t.Errorf("%s: %v, want it refused", what, err)
		}
	}
	_, err = as.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	allowed("list the pods of its node", err)
	_, err = pods.List(ctx, metav1.ListOptions{FieldSelector: exitcoord.PodOnNodeSelector("some-pod", node)})
	allowed("list one pod by name on its node (the exit request's question)", err)
	w, err := as.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	allowed("watch the pods of its node", err)
	if w != nil {
		w.Stop()
	}
	_, err = as.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	denied("list every pod", err)
	_, err = pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=another-node"})
	denied("list another node's pods", err)
	_, err = as.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
	denied("watch every pod", err)
	_, err = pods.Get(ctx, "some-pod", metav1.GetOptions{})
	denied("get a pod", err)
}
