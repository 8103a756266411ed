package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// ClusterVersions tells which Kubernetes versions a pod can meet, to decide whether native
// sidecars (init containers with restartPolicy: Always, on by default since 1.29) work for it.
// Both the API server and the kubelet must support them: an old kubelet silently runs a
// native sidecar as a plain init container that never exits, and the pod never starts.
type ClusterVersions interface {
	// ServerVersion is the API server's version.
	ServerVersion() (*version.Version, error)
	// MinKubeletVersion is the lowest kubelet version among the nodes the pod can run on:
	// its spec.nodeName's node when set, else those its nodeSelector and required node
	// affinity admit (podNodes), every node when they admit none; where says which, in
	// words for the user ("node n1", "a node that the pod may run on").
	MinKubeletVersion(pod *corev1.Pod) (v *version.Version, where string, err error)
}

// KubeClusterVersions is the ClusterVersions of a live cluster. Node versions come from an
// informer's cache, so an admission costs no API call; the server version comes from the
// discovery client and is refreshed at most once per refresh interval. Run must be running
// for the node cache to fill.
type KubeClusterVersions struct {
	discovery   discovery.ServerVersionInterface
	factory     informers.SharedInformerFactory
	nodes       corelisters.NodeLister
	nodesSynced cache.InformerSynced
	refresh     time.Duration
	log         *slog.Logger
	now         func() time.Time

	mu        sync.Mutex
	server    *version.Version
	fetchedAt time.Time // of server, or of the last failed attempt
	lastErr   error     // of the last attempt, while server is nil
	// inflight is closed when the discovery call in flight has been recorded; nil when
	// none is (one at a time, whoever asks).
	inflight chan struct{}
}

// serverRetryInterval is how long a failed lookup of the server version is remembered when
// there is no earlier answer to fall back on. Without it every admission would wait for a
// discovery call (up to the client's timeout) while the API server is unreachable, and the
// webhook would time out for all of them.
const serverRetryInterval = 10 * time.Second

// NewKubeClusterVersions builds a KubeClusterVersions. disco should have a short request
// timeout (it is called on the admission path when the cached server version expires);
// client is used for a long-running node watch and must not have one.
func NewKubeClusterVersions(client kubernetes.Interface, disco discovery.ServerVersionInterface, refresh time.Duration, log *slog.Logger) *KubeClusterVersions {
	if log == nil {
		log = slog.Default()
	}
	// Only the name and the kubelet version of a node matter here; dropping the rest keeps
	// the cache small on clusters with thousands of nodes (images, conditions, addresses).
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimNode))
	nodeInformer := factory.Core().V1().Nodes()
	return &KubeClusterVersions{
		discovery:   disco,
		factory:     factory,
		nodes:       nodeInformer.Lister(),
		nodesSynced: nodeInformer.Informer().HasSynced,
		refresh:     refresh,
		log:         log,
		now:         time.Now,
	}
}

// trimNode keeps the parts of a node that KubeClusterVersions reads: its name and labels
// (nodeSelector, node affinity) and its kubelet version.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels},
		Status:     corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: n.Status.NodeInfo.KubeletVersion}},
	}, nil
}

// Run starts the node informer, waits for its cache, primes the server version and then
// blocks until ctx is done; it returns once the informer's goroutines have stopped. Ending
// ctx is the only way to stop it, so it returns no error: a cache that never syncs shows
// as a webhook that never gets ready (see Ready), which is what the probes should see.
func (k *KubeClusterVersions) Run(ctx context.Context) {
	k.factory.Start(ctx.Done())
	defer k.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), k.nodesSynced) {
		return // ctx ended before the first sync
	}
	k.log.Info("node cache synced")
	if _, err := k.ServerVersion(); err != nil {
		// Not fatal: admissions fall back to legacy sidecars until the next attempt works.
		k.log.Warn("cannot read the API server version yet", "error", err)
	}
	<-ctx.Done()
}

// Ready reports whether the node cache has synced: before that, every pod would get a
// legacy sidecar for want of node versions, so the webhook should not take traffic.
func (k *KubeClusterVersions) Ready() bool { return k.nodesSynced() }

// ServerVersion returns the cached API server version. A cached answer older than the
// refresh interval is still returned at once while one refresh runs in the background: the
// API server's version changes only during an upgrade, and an admission must never wait
// behind a discovery call (up to the client's timeout) that another admission started. If
// a refresh fails the previous value is kept. Only while nothing was ever fetched do
// callers wait, all for the same single discovery call.
func (k *KubeClusterVersions) ServerVersion() (*version.Version, error) {
	k.mu.Lock()
	age := k.now().Sub(k.fetchedAt)
	if k.server != nil {
		if age >= k.refresh && k.inflight == nil {
			k.startRefresh()
		}
		v := k.server
		k.mu.Unlock()
		return v, nil
	}
	if k.lastErr != nil && age < serverRetryInterval && k.inflight == nil {
		err := k.lastErr
		k.mu.Unlock()
		return nil, err
	}
	var done <-chan struct{} = k.inflight
	if k.inflight == nil {
		done = k.startRefresh()
	}
	k.mu.Unlock()
	<-done // bounded by the discovery client's request timeout
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.server != nil {
		return k.server, nil
	}
	return nil, k.lastErr
}

// startRefresh starts the one discovery call in flight and returns the channel closed when
// it has been recorded. The goroutine's only owner is that call: it ends when the call
// does, which the discovery client's request timeout bounds (NewKubeClusterVersions).
// k.mu must be held.
func (k *KubeClusterVersions) startRefresh() <-chan struct{} {
	done := make(chan struct{})
	k.inflight = done
	go func() {
		v, err := k.fetchServerVersion()
		k.mu.Lock()
		defer k.mu.Unlock()
		k.fetchedAt = k.now() // on failure too: do not retry on every admission
		k.inflight = nil
		switch {
		case err == nil:
			k.server, k.lastErr = v, nil
		case k.server != nil:
			k.log.Warn("refreshing the API server version failed, keeping the cached one",
				"error", err, "cached", k.server.String())
		default:
			k.lastErr = err
		}
		close(done)
	}()
	return done
}

func (k *KubeClusterVersions) fetchServerVersion() (*version.Version, error) {
	info, err := k.discovery.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("discovery of the API server version: %w", err)
	}
	if v, err := version.ParseGeneric(info.GitVersion); err == nil {
		return v, nil
	}
	// Some distributions put a non-semver GitVersion; major and minor ("29+") still tell.
	v, err := version.ParseGeneric(info.Major + "." + trimPlus(info.Minor))
	if err != nil {
		return nil, fmt.Errorf("parsing API server version %q (%s.%s): %w", info.GitVersion, info.Major, info.Minor, err)
	}
	return v, nil
}

func trimPlus(s string) string {
	for len(s) > 0 && s[len(s)-1] == '+' {
		s = s[:len(s)-1]
	}
	return s
}

// errNoNodes is returned when the cache holds no node: the next node may be of any version.
var errNoNodes = errors.New("no node is known")

// MinKubeletVersion implements ClusterVersions. When spec.nodeName names a node absent from
// the cache (not registered yet, or just deleted) the pod's selection is used as when it
// names none. A node whose kubelet version does not parse is an error: it is not known to
// support native sidecars.
func (k *KubeClusterVersions) MinKubeletVersion(pod *corev1.Pod) (*version.Version, string, error) {
	if !k.nodesSynced() {
		return nil, "", errors.New("the node cache has not synced yet")
	}
	if name := pod.Spec.NodeName; name != "" {
		n, err := k.nodes.Get(name)
		switch {
		case err == nil:
			v, err := kubeletVersion(n)
			return v, "node " + name, err
		case !apierrors.IsNotFound(err):
			return nil, "", fmt.Errorf("looking up node %s: %w", name, err)
		}
	}
	nodes, err := k.nodes.List(labels.Everything())
	if err != nil {
		return nil, "", fmt.Errorf("listing nodes: %w", err)
	}
	admitted, selected := podNodes(pod, nodes)
	where := anyNode
	if selected {
		where = "a node that the pod's nodeSelector and node affinity admit"
	}
	v, err := lowestVersion(admitted, kubeletVersion)
	return v, where, err
}

// anyNode is MinKubeletVersion's where when every node counts.
const anyNode = "a node that the pod may run on"

// podNodes are the nodes that the pod's nodeSelector and required node affinity admit (as
// the scheduler reads them; selected true), or all of nodes when it has neither or they
// admit none: a pool of the selected label may be scaling up from zero, with any version,
// so the answer stays conservative. It is not conservative where a selection admits some
// nodes now and a node of an older kubelet joins it later (a pool of the same label scaled
// up from zero, a label added): that pod, already given a native sidecar, would not start
// there (the reference's sidecar-mode says so; the annotation forces legacy). Taints are
// not read: a node can be tainted for a while (node.kubernetes.io/not-ready until its
// kubelet reports) and take the pod once the taint is gone, sidecar and all.
func podNodes(pod *corev1.Pod, nodes []*corev1.Node) (admitted []*corev1.Node, selected bool) {
	if len(pod.Spec.NodeSelector) == 0 && (pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil ||
		pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil) {
		return nodes, false
	}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	for _, n := range nodes {
		// An error is a selector the API server would not have accepted; the node counts.
		if ok, err := required.Match(n); ok || err != nil {
			admitted = append(admitted, n)
		}
	}
	if len(admitted) == 0 {
		return nodes, false
	}
	return admitted, true
}

// lowestVersion is the lowest of the versions parse reads from items; errNoNodes for none.
func lowestVersion[T any](items []T, parse func(T) (*version.Version, error)) (*version.Version, error) {
	var lowest *version.Version
	for _, it := range items {
		v, err := parse(it)
		if err != nil {
			return nil, err
		}
		if lowest == nil || v.LessThan(lowest) {
			lowest = v
		}
	}
	if lowest == nil {
		return nil, errNoNodes
	}
	return lowest, nil
}

func kubeletVersion(n *corev1.Node) (*version.Version, error) {
	v, err := version.ParseGeneric(n.Status.NodeInfo.KubeletVersion)
	if err != nil {
		return nil, fmt.Errorf("node %s: kubelet version %q: %w", n.Name, n.Status.NodeInfo.KubeletVersion, err)
	}
	return v, nil
}
