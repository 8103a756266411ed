package credentials

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// A shared mount mode volume (contract.AttrMountMode shared) is read by a gcsfuse in the
// node's mounter, not in the pod. With a key (nodePublishSecretRef) or federation that
// gcsfuse reads as the pod's identity; with Application Default Credentials it reads as the
// mounter's (its Kubernetes service account on GKE with Workload Identity, else the node's),
// which any pod creator could then borrow by adding mountMode: shared to a volume. So ADC in
// shared mode is allowed only in the namespaces a cluster admin names (SharedADC): the
// webhook refuses the others' pods at admission and the node plugin their mounts, in the
// same words (SharedADCRefusal).

// AllNamespaces, as the one entry of a SharedADC, allows every namespace.
const AllNamespaces = "*"

// SharedADC are the namespaces whose shared volumes may read with the mounter's Application
// Default Credentials (the chart's mounter.adcNamespaces; the node plugin's and the webhook's
// --shared-adc-namespaces): names, or prefixes ending in "*" ("team-*"). Empty: none.
type SharedADC []string

// ParseSharedADC reads a comma-separated list of namespaces and prefixes, or "*" for all.
func ParseSharedADC(list string) (SharedADC, error) {
	var out SharedADC
	for _, ns := range strings.Split(list, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if ns != AllNamespaces {
			// A prefix is checked as the shortest name it allows.
			name, prefix := strings.CutSuffix(ns, "*")
			if prefix {
				name += "a"
			}
			if errs := validation.IsDNS1123Label(name); len(errs) > 0 || strings.Contains(name, "*") {
				return nil, fmt.Errorf("shared ADC namespace %q: want a namespace's name, a prefix of one followed by *, or * alone", ns)
			}
		}
		out = append(out, ns)
	}
	if len(out) > 1 && slices.Contains(out, AllNamespaces) {
		return nil, fmt.Errorf("shared ADC namespaces %q: %q stands alone (it allows every namespace)", list, AllNamespaces)
	}
	return out, nil
}

// Allows reports whether a shared volume of a pod of namespace may read with ADC.
func (a SharedADC) Allows(namespace string) bool {
	if namespace == "" {
		return false
	}
	for _, p := range a {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(namespace, prefix) || p == namespace {
			return true
		}
	}
	return false
}

// String is the list as ParseSharedADC reads it.
func (a SharedADC) String() string { return strings.Join(a, ",") }

// SharedADCRefusal says why a shared volume with Application Default Credentials is refused
// for a pod of namespace, and what to do: the webhook's denial and the node plugin's
// PermissionDenied.
func SharedADCRefusal(volume, namespace string) string {
	return fmt.Sprintf("volume %s has %s: %s and no identity of its own (no nodePublishSecretRef, no %s), so its gcsfuse would read the bucket with the node's shared mounter's Application Default Credentials, not the pod's; namespace %q is not allowed to (the chart's mounter.adcNamespaces, --shared-adc-namespaces): give the volume a nodePublishSecretRef or Workload Identity Federation (%s, or the chart's mounter.identityProvider for every shared volume), leave %s out, or ask a cluster admin to add the namespace",
		volume, contract.AttrMountMode, contract.MountModeShared, contract.AttrWorkloadIdentityProvider, namespace, contract.AttrWorkloadIdentityProvider, contract.AttrMountMode)
}
