package webhook

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// A volume of the driver whose contract.AttrMountMode is contract.MountModeShared (an
// inline volume's volumeAttributes, a PersistentVolume's, or a StorageClass parameter that
// classparams.AttributeParams passes to the volumes it provisions) is served by the node's
// shared mounter, not by the pod's sidecar. So the sidecar is injected for the other
// volumes only: a pod whose volumes of the driver are all shared gets no sidecar, no
// emptyDir, no patch at all, even with the opt-in annotation (a warning says it is
// ignored); a pod with one volume of the sidecar's gets the sidecar as before, and every
// decision about it (where it goes, which init containers it serves, whether a legacy pod
// would hang, whether it mounts a cache volume) counts the sidecar's volumes only
// (usage.sidecar). An already injected pod (re-invocation, or a copy of an injected pod)
// keeps its sidecar.

// needsSidecar reports whether a volume of the pod is the sidecar's to serve.
func (u usage) needsSidecar() bool { return len(u.sidecar) > 0 }

// sidecarNames lists the volumes of u.sidecar in volumes()'s order.
func (u usage) sidecarNames() string {
	var out []string
	for _, n := range slices.Concat(u.inline, u.claims, u.ephemeral) {
		if u.sidecar.has(n) {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

// nodeServed reports whether the pod gets no sidecar because the node's shared mounter
// serves every volume of the driver it has (at least one). With the opt-in annotation
// (opted) and a claim that could not be resolved, the annotation is read as asking for the
// sidecar for that claim, as notInjectedWarnings tells users to do: the pod is injected.
func (u usage) nodeServed(opted bool) bool {
	return u.uses() && !u.needsSidecar() && !(opted && len(u.unresolved) > 0)
}

// splitShared fills u.sidecar and u.shared from u.vols. An invalid mountMode is the
// sidecar's: an inline volume with one is refused at admission (checkInlineVolumes, with
// mountopts.MountMode's error), a PersistentVolume's or a class's at mount by the node
// plugin, and until then its pod keeps its sidecar, as for any other bad attribute there.
func (u *usage) splitShared() {
	u.sidecar = driverVolumes{}
	for name, attrs := range u.vols {
		if shared, err := mountopts.MountMode(attrs); shared && err == nil {
			u.shared = append(u.shared, name)
			continue
		}
		u.sidecar[name] = attrs
	}
	slices.Sort(u.shared)
}

// nodeServedWarnings are the warnings for a pod that gets no sidecar because the node's
// shared mounter serves all its volumes of the driver: the opt-in annotation, and every
// other annotation of ours but contract.AnnotationInjected, have no effect then. None for
// a pod without our annotations: nothing is wrong with it.
func nodeServedWarnings(annotations map[string]string, shared []string) []string {
	var out []string
	why := fmt.Sprintf("the node's shared mounter serves the pod's gcsfuse volumes (%s: %s on %s), so no gcsfuse sidecar is injected",
		contract.AttrMountMode, contract.MountModeShared, strings.Join(shared, ", "))
	if annotations[contract.AnnotationInject] == "true" {
		out = append(out, fmt.Sprintf("annotation %s: \"true\" is ignored: %s", contract.AnnotationInject, why))
	}
	var keys []string
	for k := range annotations {
		if k != contract.AnnotationInject && k != contract.AnnotationInjected && strings.HasPrefix(k, contract.AnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) > 0 {
		sort.Strings(keys)
		out = append(out, fmt.Sprintf("annotations %s are ignored: %s", strings.Join(keys, ", "), why))
	}
	return out
}

// checkSharedIdentity refuses, at admission (403), a pod whose inline shared volume would
// read its bucket with the node's mounter's Application Default Credentials, not the pod's
// (credentials.SharedADC), in a namespace the cluster admin did not name. Only where admission
// can be sure: an inline volume with no nodePublishSecretRef and no provider of its own,
// on a driver whose node plugin federates no such volume. A claim's volume may bring its
// Secret through the PersistentVolume or the class's secret parameters, and be bound or
// replaced after admission: the node plugin refuses those at mount, in the same words
// (PermissionDenied), and that check is the one that holds whatever admission saw.
func (m *Mutator) checkSharedIdentity(namespace string, volumes []corev1.Volume, u usage) error {
	if m.cfg.SharedFederated || len(u.shared) == 0 || m.cfg.SharedADC.Allows(namespace) {
		return nil
	}
	for _, v := range volumes {
		if v.CSI == nil || v.CSI.Driver != m.cfg.DriverName || v.CSI.NodePublishSecretRef != nil || !slices.Contains(u.shared, v.Name) {
			continue
		}
		// A bad identity attribute is the node plugin's to refuse, with its message.
		if c, err := credentials.Choose(credentials.Config{}, v.CSI.VolumeAttributes, false); err == nil && c.Kind == credentials.KindADC {
			return forbidden(credentials.SharedADCRefusal(v.Name, namespace))
		}
	}
	return nil
}
