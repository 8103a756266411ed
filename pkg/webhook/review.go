package webhook

import (
	"context"
	"errors"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Admission is what the webhook does with a pod, read from the decision Mutate makes: for a
// tool that predicts admission (pkg/audit, which tells before a migration which pods this
// driver would run) through the very code that admits, so the two cannot disagree.
type Admission struct {
	// Denied is the message of a denial (what kubectl shows after "denied the request: "),
	// "" when the pod is admitted.
	Denied string
	// Warnings are the admission's warnings (kubectl's "Warning: ..." lines).
	Warnings []string
	// Sidecar is the sidecar container the webhook adds, nil when it adds none.
	Sidecar *corev1.Container
	// Mode is the sidecar's mode (contract.ModeNative or contract.ModeLegacy).
	Mode string
	// Existing is set when Sidecar is the pod's own: it already carries the sidecar this
	// webhook injected (a pod read back from a cluster), which admission keeps.
	Existing bool
	// LentBy names the pod's container whose image the sidecar takes, and which the
	// sidecar replaces ("" for none: the webhook's configured image).
	LentBy string
	// Aliases maps each of the GKE driver's annotations on the pod that is read as ours to
	// that annotation of ours ("gke-gcsfuse/memory-limit" to "gcsfuse.csi.storage/memory-limit").
	Aliases map[string]string
	// NodeServed names the pod's volumes of the driver, sorted, when the pod gets no
	// sidecar because they all have mountMode: shared, which the node's shared mounter
	// serves (Sidecar is then nil); nil otherwise.
	NodeServed []string
}

// Review decides the admission of pod (being created in namespace) as Mutate does, without
// an AdmissionReview: it runs the same inject and reads its result. An error is the
// webhook's own failure (Mutate's 500), never a denial. pod is not modified.
func (m *Mutator) Review(ctx context.Context, pod *corev1.Pod, namespace string) (Admission, error) {
	pod = pod.DeepCopy()
	d, err := m.inject(ctx, pod, namespace)
	var bad *badRequestError
	switch {
	case errors.As(err, &bad):
		return Admission{Denied: bad.msg}, nil
	case err != nil:
		return Admission{}, err
	}
	a := Admission{Warnings: d.warnings, Aliases: incumbentAliases(pod.Annotations), NodeServed: d.nodeServed}
	mode := d.mode
	for _, op := range d.ops {
		switch {
		case op.Op == "remove" && removedContainer(pod, op.Path) != "":
			a.LentBy = removedContainer(pod, op.Path)
		case op.Op == "add" && a.Sidecar == nil:
			a.Sidecar = addedSidecar(op.Value)
		}
	}
	if a.Sidecar == nil && mode != "" && hasInjectedSidecar(pod) {
		a.Sidecar, a.Existing = existingSidecar(pod), true
	}
	if a.Sidecar != nil {
		a.Mode = mode
	}
	return a, nil
}

// removedContainer names the container a "remove" operation of inject takes out of pod (the
// one lending its image: inject removes nothing else).
func removedContainer(pod *corev1.Pod, path string) string {
	list, index, ok := strings.Cut(strings.TrimPrefix(path, "/spec/"), "/")
	i, err := strconv.Atoi(index)
	if !ok || err != nil {
		return ""
	}
	switch {
	case list == "initContainers" && i < len(pod.Spec.InitContainers):
		return pod.Spec.InitContainers[i].Name
	case list == "containers" && i < len(pod.Spec.Containers):
		return pod.Spec.Containers[i].Name
	}
	return ""
}

// addedSidecar returns the sidecar if an "add" operation's value is it (insertOp adds one
// container, or a list of one to an empty list).
func addedSidecar(value any) *corev1.Container {
	switch v := value.(type) {
	case corev1.Container:
		if v.Name == contract.SidecarContainerName {
			return &v
		}
	case []corev1.Container:
		if len(v) == 1 && v[0].Name == contract.SidecarContainerName {
			return &v[0]
		}
	}
	return nil
}

// existingSidecar returns the pod's own sidecar container (hasInjectedSidecar).
func existingSidecar(pod *corev1.Pod) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == contract.SidecarContainerName {
				return &list[i]
			}
		}
	}
	return nil
}
