package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// A pod that mounts a volume of this driver without the sidecar can never work: the node
// plugin mounts the bucket, but nothing serves the mount. So the webhook injects the sidecar
// into every pod that uses the driver, with or without the opt-in annotation: an inline CSI
// volume of the driver (seen in the pod itself), or a persistentVolumeClaim bound to one of
// its PersistentVolumes (two GETs per claim at admission). The annotation still opts out
// ("false") and still chooses the mode.
//
// A claim is a volume like any other once resolved: the claims are looked up once per
// admission, whatever the annotation says, and every decision that depends on which
// volumes are ours (where the native sidecar goes, which init containers it serves,
// whether a legacy pod would hang, whether gcsfuse needs a cache volume) reads that one
// driverVolumes map.

// claimLookupTimeout bounds the claim and volume lookups of one admission, well inside the
// webhook's 10 s timeout.
const claimLookupTimeout = 3 * time.Second

// ClaimedVolume is what a PersistentVolumeClaim resolves to.
type ClaimedVolume struct {
	// Bound is false when the claim names no volume yet, or it or its volume does not
	// exist.
	Bound bool
	// Driver is the CSI driver of the bound PersistentVolume ("" for a volume that is not
	// CSI).
	Driver string
	// Attributes are the PersistentVolume's spec.csi.volumeAttributes: they ask for a file
	// cache like an inline volume's.
	Attributes map[string]string
}

// VolumeClaims finds the CSI volume behind a pod's PersistentVolumeClaim.
type VolumeClaims interface {
	// ClaimVolume resolves claim in namespace to its bound PersistentVolume.
	ClaimVolume(ctx context.Context, namespace, claim string) (ClaimedVolume, error)
}

// KubeVolumeClaims is the VolumeClaims of a live cluster (RBAC: get on
// persistentvolumeclaims and persistentvolumes).
type KubeVolumeClaims struct{ Client kubernetes.Interface }

// ClaimVolume implements VolumeClaims.
func (k KubeVolumeClaims) ClaimVolume(ctx context.Context, namespace, claim string) (ClaimedVolume, error) {
	pvc, err := k.Client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ClaimedVolume{}, nil
	case err != nil:
		return ClaimedVolume{}, fmt.Errorf("claim %s/%s: %w", namespace, claim, err)
	case pvc.Spec.VolumeName == "":
		return ClaimedVolume{}, nil
	}
	pv, err := k.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ClaimedVolume{}, nil
	case err != nil:
		return ClaimedVolume{}, fmt.Errorf("volume %s of claim %s/%s: %w", pvc.Spec.VolumeName, namespace, claim, err)
	case pv.Spec.CSI == nil:
		return ClaimedVolume{Bound: true}, nil
	}
	return ClaimedVolume{Bound: true, Driver: pv.Spec.CSI.Driver, Attributes: pv.Spec.CSI.VolumeAttributes}, nil
}

// driverVolumes maps the name of every pod volume served by the driver (an inline CSI
// volume, or a claim bound to one of its PersistentVolumes) to its volumeAttributes (nil
// for none).
type driverVolumes map[string]map[string]string

func (d driverVolumes) has(name string) bool {
	_, ok := d[name]
	return ok
}

// unresolvedClaim is a claim volume the webhook could not resolve: err is nil for a claim
// that is not bound (or does not exist).
type unresolvedClaim struct {
	volume, claim string
	err           error
}

// usage is how a pod uses the driver, as far as admission can tell.
type usage struct {
	// vols are the pod's volumes of the driver, inline and claims.
	vols driverVolumes
	// inline are the names of the pod's inline CSI volumes of the driver; claims those of
	// its persistentVolumeClaim volumes bound to the driver's volumes. Both sorted.
	inline, claims []string
	// unresolved are claims the webhook could not resolve (unbound, lookup failed): if
	// one turns out to be the driver's, the node plugin fails its mount naming the cause.
	unresolved []unresolvedClaim
}

func (u usage) uses() bool { return len(u.vols) > 0 }

func (u usage) volumes() string {
	return strings.Join(append(append([]string{}, u.inline...), u.claims...), ", ")
}

// notInjectedWarnings are the warnings for a pod that gets no sidecar because no volume was
// recognised: an unresolved claim may be the driver's.
func (u usage) notInjectedWarnings(driver string) []string {
	var out []string
	for _, c := range u.unresolved {
		if c.err != nil {
			out = append(out, fmt.Sprintf(
				"volume %s: cannot tell whether claim %s is a %s volume (%v); if it is, the pod gets no gcsfuse sidecar and its mount fails: add the annotation %s: \"true\"",
				c.volume, c.claim, driver, c.err, contract.AnnotationInject))
			continue
		}
		out = append(out, fmt.Sprintf(
			"volume %s: claim %s is not bound to a volume yet; if it binds to a %s volume, the pod has no gcsfuse sidecar and its mount fails: bind it first, or add the annotation %s: \"true\"",
			c.volume, c.claim, driver, contract.AnnotationInject))
	}
	return out
}

// injectedWarnings are the warnings for a pod that gets the sidecar: an unresolved claim
// matters only when an init container mounts it, since whether that container needs the
// sidecar running (and, in legacy mode, whether the pod would hang) cannot be told. A
// claim that only regular containers mount is served either way, so the common case of a
// WaitForFirstConsumer claim beside a bucket gets no noise.
func (u usage) injectedWarnings(driver string, init []corev1.Container) []string {
	var out []string
	for _, c := range u.unresolved {
		var readers []string
		for _, ic := range init {
			// A placeholder or the GKE add-on's sidecar: a sidecar either way, never a reader.
			if !isLentName(ic.Name, true) && slices.ContainsFunc(ic.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == c.volume }) {
				readers = append(readers, ic.Name)
			}
		}
		if len(readers) == 0 {
			continue
		}
		why := "is not bound to a volume yet"
		if c.err != nil {
			why = fmt.Sprintf("could not be resolved (%v)", c.err)
		}
		out = append(out, fmt.Sprintf(
			"volume %s: claim %s %s; if it is a %s volume, the gcsfuse sidecar does not know that init containers %s use it",
			c.volume, c.claim, why, driver, strings.Join(readers, ", ")))
	}
	return out
}

// driverUsage finds the pod's volumes of the driver, installed as driver, with their
// attributes. claims may be nil (no lookups: only inline volumes are seen). It is called
// once per admission and bounded by claimLookupTimeout altogether.
func driverUsage(ctx context.Context, claims VolumeClaims, driver, namespace string, volumes []corev1.Volume) usage {
	u := usage{vols: driverVolumes{}}
	for _, v := range volumes {
		if v.CSI != nil && v.CSI.Driver == driver {
			u.vols[v.Name] = v.CSI.VolumeAttributes
			u.inline = append(u.inline, v.Name)
		}
	}
	if claims != nil && slices.ContainsFunc(volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil }) {
		ctx, cancel := context.WithTimeout(ctx, claimLookupTimeout)
		defer cancel()
		for _, v := range volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			claim := v.PersistentVolumeClaim.ClaimName
			cv, err := claims.ClaimVolume(ctx, namespace, claim)
			switch {
			case err != nil:
				u.unresolved = append(u.unresolved, unresolvedClaim{volume: v.Name, claim: claim, err: err})
			case !cv.Bound:
				u.unresolved = append(u.unresolved, unresolvedClaim{volume: v.Name, claim: claim})
			case cv.Driver == driver:
				u.vols[v.Name] = cv.Attributes
				u.claims = append(u.claims, v.Name)
			}
		}
	}
	slices.Sort(u.inline)
	slices.Sort(u.claims)
	return u
}
