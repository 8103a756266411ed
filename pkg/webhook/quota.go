package webhook

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A namespace with a ResourceQuota on limits.cpu refuses every pod with a container that
// sets no cpu limit, and a LimitRange refuses a container outside its min/max: the API
// server applies both to the sidecar too, but its LimitRanger fills in defaults before the
// mutating webhooks run, so the injected sidecar gets none. The webhook reads the
// namespace's ResourceQuotas and LimitRanges at injection and gives the sidecar what they
// ask for (quotarules.go), so that a pod which fits without the sidecar is not refused for
// the sidecar's sake, or is refused with a message saying what the sidecar costs.

// namespacePolicyTimeout bounds the two lists of one admission. With claimLookupTimeout it
// stays well inside the webhook's 10 s timeout: a slow API server costs the sidecar its
// adjustment (a warning), never the admission.
const namespacePolicyTimeout = 2 * time.Second

// ResourcePolicy is what bounds a namespace's containers.
type ResourcePolicy struct {
	Quotas      []corev1.ResourceQuota
	LimitRanges []corev1.LimitRange
}

// NamespacePolicy reads a namespace's ResourceQuotas and LimitRanges.
type NamespacePolicy interface {
	ResourcePolicy(ctx context.Context, namespace string) (ResourcePolicy, error)
}

// KubeNamespacePolicy is the NamespacePolicy of a live cluster (RBAC: list on
// resourcequotas and limitranges).
type KubeNamespacePolicy struct{ Client kubernetes.Interface }

// ResourcePolicy implements NamespacePolicy.
func (k KubeNamespacePolicy) ResourcePolicy(ctx context.Context, namespace string) (ResourcePolicy, error) {
	quotas, err := k.Client.CoreV1().ResourceQuotas(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ResourcePolicy{}, fmt.Errorf("listing the ResourceQuotas of namespace %s: %w", namespace, err)
	}
	ranges, err := k.Client.CoreV1().LimitRanges(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ResourcePolicy{}, fmt.Errorf("listing the LimitRanges of namespace %s: %w", namespace, err)
	}
	return ResourcePolicy{Quotas: quotas.Items, LimitRanges: ranges.Items}, nil
}

// namespacePolicy reads the namespace's policy within namespacePolicyTimeout. A nil source
// is an empty policy; a failure is a warning for the user and an empty policy, so that the
// sidecar gets the plain defaults (the API server still applies the quotas).
func namespacePolicy(ctx context.Context, source NamespacePolicy, namespace string) (ResourcePolicy, []string) {
	if source == nil {
		return ResourcePolicy{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, namespacePolicyTimeout)
	defer cancel()
	p, err := source.ResourcePolicy(ctx, namespace)
	if err != nil {
		return ResourcePolicy{}, []string{fmt.Sprintf(
			"the gcsfuse sidecar gets its default resources: its ResourceQuotas and LimitRanges could not be read (%v)", err)}
	}
	return p, nil
}
