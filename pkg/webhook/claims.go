package webhook

import (
	"context"
	"fmt"
	"sort"
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

// claimLookupTimeout bounds the claim and volume lookups of one admission, well inside the
// webhook's 10 s timeout.
const claimLookupTimeout = 3 * time.Second

// VolumeClaims finds the CSI driver behind a pod's PersistentVolumeClaim.
type VolumeClaims interface {
	// ClaimDriver returns the CSI driver of the PersistentVolume that claim is bound to
	// ("" for a volume that is not CSI), and bound=false when the claim names no volume
	// yet or does not exist.
	ClaimDriver(ctx context.Context, namespace, claim string) (driver string, bound bool, err error)
}

// KubeVolumeClaims is the VolumeClaims of a live cluster (RBAC: get on
// persistentvolumeclaims and persistentvolumes).
type KubeVolumeClaims struct{ Client kubernetes.Interface }

// ClaimDriver implements VolumeClaims.
func (k KubeVolumeClaims) ClaimDriver(ctx context.Context, namespace, claim string) (string, bool, error) {
	pvc, err := k.Client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("claim %s/%s: %w", namespace, claim, err)
	case pvc.Spec.VolumeName == "":
		return "", false, nil
	}
	pv, err := k.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("volume %s of claim %s/%s: %w", pvc.Spec.VolumeName, namespace, claim, err)
	case pv.Spec.CSI == nil:
		return "", true, nil
	}
	return pv.Spec.CSI.Driver, true, nil
}

// usage is how a pod uses the driver, as far as admission can tell.
type usage struct {
	// inline are the pod's inline CSI volumes of the driver; claims its
	// persistentVolumeClaim volumes bound to the driver's volumes.
	inline, claims []string
	// warnings are claims the webhook could not resolve (unbound, lookup failed): if one
	// turns out to be the driver's, the node plugin fails its mount naming the cause.
	warnings []string
}

func (u usage) uses() bool { return len(u.inline)+len(u.claims) > 0 }

func (u usage) volumes() string {
	return strings.Join(append(append([]string{}, u.inline...), u.claims...), ", ")
}

// driverUsage finds the pod's volumes of the driver, installed as driver. claims may be nil
// (no lookups).
func driverUsage(ctx context.Context, claims VolumeClaims, driver, namespace string, volumes []corev1.Volume) usage {
	var u usage
	for n := range csiVolumeNames(driver, volumes) {
		u.inline = append(u.inline, n)
	}
	sort.Strings(u.inline)
	if claims == nil {
		return u
	}
	ctx, cancel := context.WithTimeout(ctx, claimLookupTimeout)
	defer cancel()
	for _, v := range volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		claim := v.PersistentVolumeClaim.ClaimName
		claimDriver, bound, err := claims.ClaimDriver(ctx, namespace, claim)
		switch {
		case err != nil:
			u.warnings = append(u.warnings, fmt.Sprintf(
				"volume %s: cannot tell whether claim %s is a %s volume (%v); if it is, the pod gets no gcsfuse sidecar and its mount fails: add the annotation %s: \"true\"",
				v.Name, claim, driver, err, contract.AnnotationInject))
		case !bound:
			u.warnings = append(u.warnings, fmt.Sprintf(
				"volume %s: claim %s is not bound to a volume yet; if it binds to a %s volume, the pod has no gcsfuse sidecar and its mount fails: bind it first, or add the annotation %s: \"true\"",
				v.Name, claim, driver, contract.AnnotationInject))
		case claimDriver == driver:
			u.claims = append(u.claims, v.Name)
		}
	}
	return u
}
