package audit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/webhook"
)

// Inventory is the set of objects an audit judges, in the order they were added. A pod's
// claims are resolved within it, as the API server would resolve them once everything
// was applied: a claim's volumeName, or a PersistentVolume whose claimRef names the claim.
type Inventory struct {
	entries []entry
	pvs     map[string]*corev1.PersistentVolume
	pvcs    map[string]*corev1.PersistentVolumeClaim // by namespace/name
	classes map[string]*storagev1.StorageClass
	// configMaps are the ConfigMaps read, for the pods that name one as their credentials;
	// liveConfigMaps reads those not among them from a cluster (nil: none).
	configMaps     map[string]*corev1.ConfigMap // by namespace/name
	liveConfigMaps webhook.ConfigMaps
}

// entry is one object with where it was read.
type entry struct {
	ref    Ref
	source string
	// obj is a workload (a pod or an object with a pod template), a PersistentVolume, a
	// PersistentVolumeClaim or a StorageClass; nil for a kind the audit does not read.
	obj any
}

// NewInventory returns an empty Inventory.
func NewInventory() *Inventory {
	return &Inventory{pvs: map[string]*corev1.PersistentVolume{}, pvcs: map[string]*corev1.PersistentVolumeClaim{},
		classes: map[string]*storagev1.StorageClass{}, configMaps: map[string]*corev1.ConfigMap{}}
}

// Add adds one object read at source. obj is one of *corev1.Pod, *appsv1.Deployment,
// *appsv1.StatefulSet, *appsv1.DaemonSet, *appsv1.ReplicaSet, *batchv1.Job,
// *batchv1.CronJob, *corev1.PersistentVolume, *corev1.PersistentVolumeClaim,
// *storagev1.StorageClass or *corev1.ConfigMap (read as a pod's credentials, not judged);
// anything else is an error (a caller's mistake: Decode notes
// kinds it does not read with AddSkipped).
func (inv *Inventory) Add(source string, obj any) error {
	var ref Ref
	switch o := obj.(type) {
	case *corev1.Pod:
		ref = Ref{"Pod", o.Namespace, o.Name}
	case *appsv1.Deployment:
		ref = Ref{"Deployment", o.Namespace, o.Name}
	case *appsv1.StatefulSet:
		ref = Ref{"StatefulSet", o.Namespace, o.Name}
	case *appsv1.DaemonSet:
		ref = Ref{"DaemonSet", o.Namespace, o.Name}
	case *appsv1.ReplicaSet:
		ref = Ref{"ReplicaSet", o.Namespace, o.Name}
	case *batchv1.Job:
		ref = Ref{"Job", o.Namespace, o.Name}
	case *batchv1.CronJob:
		ref = Ref{"CronJob", o.Namespace, o.Name}
	case *corev1.PersistentVolume:
		ref = Ref{"PersistentVolume", "", o.Name}
		inv.pvs[o.Name] = o
	case *corev1.PersistentVolumeClaim:
		ref = Ref{"PersistentVolumeClaim", o.Namespace, o.Name}
		inv.pvcs[o.Namespace+"/"+o.Name] = o
	case *storagev1.StorageClass:
		ref = Ref{"StorageClass", "", o.Name}
		inv.classes[o.Name] = o
	case *corev1.ConfigMap:
		ref = Ref{"ConfigMap", o.Namespace, o.Name}
		inv.configMaps[o.Namespace+"/"+o.Name] = o
	default:
		return fmt.Errorf("audit: cannot add a %T", obj)
	}
	inv.entries = append(inv.entries, entry{ref: ref, source: source, obj: obj})
	return nil
}

// AddSkipped records an object of a kind the audit does not read (a Service, a
// Secret...), so that the report says it was seen and skipped.
func (inv *Inventory) AddSkipped(source string, ref Ref) {
	inv.entries = append(inv.entries, entry{ref: ref, source: source})
}

// ReadConfigMapsFrom makes the ConfigMaps a pod names as its credentials that are not
// among the objects added be read from cs (an audit of a live cluster).
func (inv *Inventory) ReadConfigMapsFrom(cs webhook.ConfigMaps) { inv.liveConfigMaps = cs }

// ConfigMap implements webhook.ConfigMaps: one added (a namespace left empty matching any),
// else one read from the cluster, else webhook.ErrNotAudited (the pod is judged with a
// warning that its ConfigMap was not checked: manifests seldom carry it, a kubectl create
// configmap does).
func (inv *Inventory) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	if c := inv.configMaps[namespace+"/"+name]; c != nil {
		return c, nil
	}
	for _, c := range inv.configMaps {
		if c.Name == name && sameNamespace(c.Namespace, namespace) {
			return c, nil
		}
	}
	if inv.liveConfigMaps != nil {
		return inv.liveConfigMaps.ConfigMap(ctx, namespace, name)
	}
	return nil, webhook.ErrNotAudited
}

// sameNamespace: a namespace left empty (a manifest applied to kubectl's current
// namespace) matches any.
func sameNamespace(a, b string) bool { return a == b || a == "" || b == "" }

// claim finds the claim name in namespace, nil when it is not in the inventory.
func (inv *Inventory) claim(namespace, name string) *corev1.PersistentVolumeClaim {
	if c := inv.pvcs[namespace+"/"+name]; c != nil {
		return c
	}
	for _, e := range inv.entries {
		if c, ok := e.obj.(*corev1.PersistentVolumeClaim); ok && c.Name == name && sameNamespace(c.Namespace, namespace) {
			return c
		}
	}
	return nil
}

// boundVolume is the PersistentVolume claim name in namespace binds to: the one its
// volumeName names, else one whose claimRef names it (with the claim's UID when both have
// one, as the webhook and the PV controller match them).
func (inv *Inventory) boundVolume(namespace, name string) *corev1.PersistentVolume {
	c := inv.claim(namespace, name)
	if c != nil && c.Spec.VolumeName != "" {
		return inv.pvs[c.Spec.VolumeName]
	}
	for _, e := range inv.entries {
		pv, ok := e.obj.(*corev1.PersistentVolume)
		if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != name || !sameNamespace(pv.Spec.ClaimRef.Namespace, namespace) {
			continue
		}
		if r := pv.Spec.ClaimRef.UID; r == "" || c == nil || c.UID == "" || r == c.UID {
			return pv
		}
	}
	return nil
}

// ClaimVolume implements webhook.VolumeClaims over the inventory, so that the webhook's
// decision (Mutator.Review) sees a pod's claims as it would in the cluster. A claim of the
// inventory that no PersistentVolume of it binds is pending, of its StorageClass.
func (inv *Inventory) ClaimVolume(_ context.Context, namespace, claim string) (webhook.ClaimedVolume, error) {
	pv := inv.boundVolume(namespace, claim)
	switch {
	case pv == nil:
		if c := inv.claim(namespace, claim); c != nil && c.Spec.VolumeName == "" {
			return webhook.ClaimedVolume{Pending: true, StorageClassName: c.Spec.StorageClassName}, nil
		}
		return webhook.ClaimedVolume{}, nil
	}
	return webhook.ClaimedVolumeOf(pv), nil
}

// class is the StorageClass a claim's spec.storageClassName names: nil for the cluster's
// default one, picked among the inventory's as Kubernetes picks it
// (webhook.DefaultStorageClass), "" for no class. A class that is not in the input is nil.
func (inv *Inventory) class(className *string) *storagev1.StorageClass {
	if className == nil {
		classes := slices.SortedFunc(maps.Values(inv.classes), func(a, b *storagev1.StorageClass) int { return strings.Compare(a.Name, b.Name) })
		return webhook.DefaultStorageClass(classes)
	}
	return inv.classes[*className]
}

// ClassVolume implements webhook.VolumeClaims over the inventory's StorageClasses, the
// default one picked as Kubernetes does (webhook.DefaultStorageClass). A class that is not
// in the input is no class: a claim of it is unresolved, as one of a class that provisions
// nothing, rather than a lookup error.
func (inv *Inventory) ClassVolume(_ context.Context, className *string) (webhook.ClassedVolume, error) {
	return webhook.ClassedVolumeOf(inv.class(className)), nil
}
