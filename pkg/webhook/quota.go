package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// A namespace with a ResourceQuota on limits.cpu refuses every pod with a container that
// sets no cpu limit, and a LimitRange refuses a container outside its min/max: the API
// server applies both to the sidecar too, but its LimitRanger fills in defaults before the
// mutating webhooks run, so the injected sidecar gets none. The webhook reads the
// namespace's ResourceQuotas and LimitRanges (from a cache) at injection and gives the sidecar what they
// ask for (quotarules.go), so that a pod which fits without the sidecar is not refused for
// the sidecar's sake, or is refused with a message saying what the sidecar costs.

// namespacePolicyTimeout bounds a NamespacePolicy's answer in one admission. With
// claimLookupTimeout it stays well inside the webhook's 10 s timeout: a slow source costs
// the sidecar its adjustment (a warning), never the admission.
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

// CachedNamespacePolicy is the NamespacePolicy of a live cluster, served from informer
// caches of every namespace's ResourceQuotas and LimitRanges (RBAC: list and watch), so that
// an admission costs no API call: listing them per admission doubled the webhook's latency
// under load (e2e TestWebhookRestart probed too few admissions). A quota's status.used is
// as fresh as the watch, which is as fresh as a list would be a moment later.
type CachedNamespacePolicy struct {
	factory informers.SharedInformerFactory
	quotas  corelisters.ResourceQuotaLister
	ranges  corelisters.LimitRangeLister
	synced  []cache.InformerSynced
}

// NewCachedNamespacePolicy builds a CachedNamespacePolicy; Run fills and follows its caches.
// client must have no request timeout (it carries the watches).
func NewCachedNamespacePolicy(client kubernetes.Interface) *CachedNamespacePolicy {
	factory := informers.NewSharedInformerFactory(client, 0)
	q, r := factory.Core().V1().ResourceQuotas(), factory.Core().V1().LimitRanges()
	return &CachedNamespacePolicy{
		factory: factory, quotas: q.Lister(), ranges: r.Lister(),
		synced: []cache.InformerSynced{q.Informer().HasSynced, r.Informer().HasSynced},
	}
}

// Run starts the informers and blocks until ctx is done; it returns once their goroutines
// have stopped.
func (c *CachedNamespacePolicy) Run(ctx context.Context) {
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	cache.WaitForCacheSync(ctx.Done(), c.synced...)
	<-ctx.Done()
}

// Ready reports whether both caches have synced: before that, a namespace's quota would be
// missed and its pods refused for the sidecar's sake.
func (c *CachedNamespacePolicy) Ready() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// ResourcePolicy implements NamespacePolicy.
func (c *CachedNamespacePolicy) ResourcePolicy(_ context.Context, namespace string) (ResourcePolicy, error) {
	if !c.Ready() {
		return ResourcePolicy{}, errors.New("the ResourceQuota and LimitRange caches have not synced yet")
	}
	quotas, err := c.quotas.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return ResourcePolicy{}, fmt.Errorf("the ResourceQuotas of namespace %s: %w", namespace, err)
	}
	ranges, err := c.ranges.LimitRanges(namespace).List(labels.Everything())
	if err != nil {
		return ResourcePolicy{}, fmt.Errorf("the LimitRanges of namespace %s: %w", namespace, err)
	}
	var p ResourcePolicy
	for _, q := range quotas {
		p.Quotas = append(p.Quotas, *q.DeepCopy())
	}
	for _, r := range ranges {
		p.LimitRanges = append(p.LimitRanges, *r.DeepCopy())
	}
	return p, nil
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
