package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// A PersistentVolume made beforehand for one claim names it in spec.claimRef (namespace and
// name), and the claim names no volume: the PV controller binds the two (sets the claim's
// volumeName) a moment after both exist. Applied together with the pod (one kubectl apply,
// or Kubernetes' storage e2e "a PVC followed by a pre-bound PV" and then the pod), the claim
// is not bound yet at the pod's admission, and its storageClassName may name a class that
// does not exist. The PV controller binds a claim to a volume whose claimRef names it
// before anything else, whatever the claim's class (FindMatchingVolume,
// k8s.io/component-helpers/storage/volume): so does the webhook, from a cache of the
// cluster's PersistentVolumes indexed by the claim their claimRef names, an admission
// costing no API call for it.
//
// The cache is as fresh as its watch: a volume created a moment before the pod is in it
// once its watch event has arrived, normally within milliseconds, while the claim's GET
// earlier in the same admission is still under way. On a loaded API server that event can
// come later (it did in CI: the storage suite's "multiple PV pointing to the same storage"
// creates the claim, the pre-bound volume and the pod back to back, and the pod got no
// sidecar): so a pending claim whose StorageClass does not tell (none, no such class, or
// one that provisions nothing) is looked up again with a live, paged list of the volumes
// (PreboundLive), bounded by the admission's look-up timeout. A volume created after the
// pod still leaves the claim unresolved (a warning, then a mount refused for want of the
// sidecar), as does a claim whose volumeName names a volume that does not exist yet: the PV
// controller binds a claim that names a volume only to that one.

// claimRefIndex indexes the cached PersistentVolumes by their claimRef's "namespace/name".
const claimRefIndex = "claimRef"

// PreboundVolumes is a cache of the cluster's PersistentVolumes (RBAC: list and watch)
// that finds the ones pre-bound to a claim by their claimRef. Run must be running for it to
// fill; until it has synced it finds nothing.
type PreboundVolumes struct {
	factory informers.SharedInformerFactory
	indexer cache.Indexer
	synced  cache.InformerSynced
}

// NewPreboundVolumes builds a PreboundVolumes. client is used for a long-running watch and
// must not have a request timeout.
func NewPreboundVolumes(client kubernetes.Interface) *PreboundVolumes {
	// Only a volume's claimRef and CSI driver and attributes matter here: dropping the rest
	// keeps the cache small on clusters with many volumes.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimVolume))
	informer := factory.InformerFor(&corev1.PersistentVolume{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewPersistentVolumeInformer(c, resync, cache.Indexers{claimRefIndex: claimRefKey})
	})
	return &PreboundVolumes{factory: factory, indexer: informer.GetIndexer(), synced: informer.HasSynced}
}

// claimRefKey is the claimRefIndex key of a PersistentVolume: none without a claimRef.
func claimRefKey(obj any) ([]string, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil {
		return nil, nil
	}
	return []string{pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name}, nil
}

// trimVolume keeps the parts of a PersistentVolume that PreboundVolumes reads (its claimRef,
// CSI driver and attributes, mountOptions): of one
// without a claimRef (found by no look-up until an update gives it one, which comes whole)
// only its name.
func trimVolume(obj any) (any, error) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return obj, nil
	}
	out := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{
		Name: pv.Name, UID: pv.UID, ResourceVersion: pv.ResourceVersion, DeletionTimestamp: pv.DeletionTimestamp}}
	if r := pv.Spec.ClaimRef; r != nil {
		out.Spec.ClaimRef = &corev1.ObjectReference{Namespace: r.Namespace, Name: r.Name, UID: r.UID}
		if c := pv.Spec.CSI; c != nil {
			out.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: c.Driver, VolumeAttributes: c.VolumeAttributes}
			out.Spec.MountOptions = pv.Spec.MountOptions
		}
	}
	return out, nil
}

// Run starts the informer, waits for its cache and then blocks until ctx is done; it
// returns once the informer's goroutines have stopped.
func (p *PreboundVolumes) Run(ctx context.Context) {
	p.factory.Start(ctx.Done())
	defer p.factory.Shutdown()
	cache.WaitForCacheSync(ctx.Done(), p.synced)
	<-ctx.Done()
}

// Ready reports whether the cache has synced: before that, a pod whose claim a volume's
// claimRef binds would get no sidecar.
func (p *PreboundVolumes) Ready() bool { return p.synced() }

// volumesOf are the cached PersistentVolumes pre-bound to pvc (preboundTo), sorted by name.
// None when p is nil or its cache has not synced yet: the claim is then resolved as if no
// volume were pre-bound to it (and usage.claim asks the API server when its class does not
// tell, KubeVolumeClaims.PreboundLive).
func (p *PreboundVolumes) volumesOf(pvc *corev1.PersistentVolumeClaim) ([]*corev1.PersistentVolume, error) {
	if p == nil || !p.synced() {
		return nil, nil
	}
	objs, err := p.indexer.ByIndex(claimRefIndex, pvc.Namespace+"/"+pvc.Name)
	if err != nil {
		return nil, err
	}
	var out []*corev1.PersistentVolume
	for _, o := range objs {
		if pv, ok := o.(*corev1.PersistentVolume); ok && preboundTo(pvc, pv) {
			out = append(out, pv)
		}
	}
	sortVolumes(out)
	return out, nil
}

// preboundTo reports whether pv is pre-bound to pvc: its claimRef names it, with its UID
// when the claimRef has one (the PV controller's IsVolumeBoundToClaim; a volume released by
// an earlier claim of that name keeps that claim's UID), and it is not being deleted (the PV
// controller binds none of those).
func preboundTo(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) bool {
	r := pv.Spec.ClaimRef
	return r != nil && r.Namespace == pvc.Namespace && r.Name == pvc.Name && pv.DeletionTimestamp == nil &&
		(r.UID == "" || r.UID == pvc.UID)
}

func sortVolumes(pvs []*corev1.PersistentVolume) {
	slices.SortFunc(pvs, func(a, b *corev1.PersistentVolume) int { return strings.Compare(a.Name, b.Name) })
}

// preboundVolume is what a claim resolves to through the volumes pre-bound to it (at least
// one): the first's. Several of different drivers are an error: which one the PV controller
// binds cannot be told.
func preboundVolume(pvs []*corev1.PersistentVolume) (ClaimedVolume, error) {
	for _, pv := range pvs[1:] {
		if a, b := volumeDriver(pvs[0]), volumeDriver(pv); a != b {
			return ClaimedVolume{}, fmt.Errorf("PersistentVolumes %s (%s) and %s (%s) both name it in their claimRef",
				pvs[0].Name, driverOrNone(a), pv.Name, driverOrNone(b))
		}
	}
	return ClaimedVolumeOf(pvs[0]), nil
}

// volumeDriver is a PersistentVolume's CSI driver, "" for a volume that is not CSI.
func volumeDriver(pv *corev1.PersistentVolume) string {
	if pv.Spec.CSI == nil {
		return ""
	}
	return pv.Spec.CSI.Driver
}

func driverOrNone(driver string) string {
	if driver == "" {
		return "not a CSI volume"
	}
	return "driver " + driver
}

// livePreboundPageSize and livePreboundPages bound PreboundLive's list: 20 pages of 500
// volumes. A cluster with more leaves the claim unresolved, as before the look-up.
const (
	livePreboundPageSize = 500
	livePreboundPages    = 20
	// livePreboundRecent: a claim older than this, with the cache synced, is not looked up
	// live. The live list is for a volume made with the claim (one apply, or the storage
	// suite's claim, pre-bound volume and pod back to back) whose watch event the cache
	// has not had yet: seconds on a loaded API server. Every pending claim of another
	// driver's class (each local-PV StatefulSet's pod) would otherwise list every volume of
	// the cluster at each admission.
	livePreboundRecent = 30 * time.Second
	// LiveListRate and LiveListBurst are the webhook's bound on live lists across
	// admissions (KubeVolumeClaims.Live): a burst of new claims costs no more than this.
	LiveListRate  = rate.Limit(5)
	LiveListBurst = 10
)

// liveWorthIt reports whether a pending claim's pre-bound volumes are worth a live list:
// the cache cannot tell yet (not synced), or the claim is new enough that a volume made
// with it may not have reached the cache; and the limiter allows one.
func (k KubeVolumeClaims) liveWorthIt(pvc *corev1.PersistentVolumeClaim) bool {
	return k.maybeStale(pvc) && (k.Live == nil || k.Live.Allow())
}

// maybeStale reports whether the cache may lack a volume pre-bound to pvc: it has not
// synced, or pvc is new enough that such a volume's watch event may not have come yet.
func (k KubeVolumeClaims) maybeStale(pvc *corev1.PersistentVolumeClaim) bool {
	now := time.Now
	if k.now != nil {
		now = k.now
	}
	synced := k.Prebound != nil && k.Prebound.Ready()
	return !synced || now().Sub(pvc.CreationTimestamp.Time) <= livePreboundRecent
}

// PreboundLive resolves a claim that names no volume, and that the cache found no volume
// pre-bound to, from the API server itself: the claim again (the PV controller may have
// bound it since), then every PersistentVolume, paged (listPrebound). It answers Pending
// when none names the claim.
func (k KubeVolumeClaims) PreboundLive(ctx context.Context, namespace, claim string) (ClaimedVolume, error) {
	return k.resolveClaim(ctx, namespace, claim, true)
}

// listPrebound is volumesOf from a live, paged list of the cluster's PersistentVolumes,
// read from the API server's watch cache (resourceVersion 0: no etcd read, and ahead of
// this webhook's own cache, which that watch cache feeds).
func (k KubeVolumeClaims) listPrebound(ctx context.Context, pvc *corev1.PersistentVolumeClaim) ([]*corev1.PersistentVolume, error) {
	var found []*corev1.PersistentVolume
	cont := ""
	for range livePreboundPages {
		opts := metav1.ListOptions{Limit: livePreboundPageSize, Continue: cont}
		if cont == "" {
			opts.ResourceVersion = "0" // a continue carries its own
		}
		list, err := k.Client.CoreV1().PersistentVolumes().List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			if preboundTo(pvc, &list.Items[i]) {
				found = append(found, &list.Items[i])
			}
		}
		if cont = list.Continue; cont == "" {
			sortVolumes(found)
			return found, nil
		}
	}
	return nil, fmt.Errorf("more than %d PersistentVolumes to look through", livePreboundPages*livePreboundPageSize)
}
