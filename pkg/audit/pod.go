package audit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// The GKE driver's pod volumes for its sidecar (docs/migration.md): its buffer and cache
// are mounted by this driver's sidecar too (the webhook reads them), its tmp volume has no
// equivalent.
const (
	gkeBufferVolume = "gke-gcsfuse-buffer"
	gkeCacheVolume  = "gke-gcsfuse-cache"
	gkeTmpVolume    = "gke-gcsfuse-tmp"
)

// admission judges what the webhook, installed under driver, does with the pod: it runs
// the webhook's own decision (Mutator.Review) and reports the denial, or the injection and
// what in it was mapped, or that the node's shared mounter serves all the pod's volumes
// (mountMode: shared, no sidecar needed), and the webhook's warnings. usesDriver says that
// the pod has volumes of the driver, whose mounts fail without a sidecar unless shared.
func (a *auditor) admission(ctx context.Context, driver string, meta metav1.ObjectMeta, spec corev1.PodSpec, usesDriver bool, said map[string]bool) error {
	m, err := a.mutator(driver)
	if err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: *meta.DeepCopy(), Spec: *spec.DeepCopy()}
	pod.Namespace = a.namespace()
	if a.cur.ref.Kind == "Pod" {
		pod.Name = a.cur.ref.Name
	} else {
		pod.Name, pod.GenerateName = "", a.cur.ref.Name+"-"
	}
	adm, err := m.Review(ctx, pod, pod.Namespace)
	if err != nil {
		return fmt.Errorf("the webhook's decision: %w", err)
	}
	if adm.Denied != "" {
		if !said[adm.Denied] {
			a.add("pod", Refused, StageAdmission, adm.Denied)
		}
		return nil
	}
	switch {
	case adm.Sidecar == nil && len(adm.NodeServed) > 0:
		// No sidecar, and none needed: the node plugin serves these volumes itself.
		a.add("pod", Unchanged, "", fmt.Sprintf("no sidecar: the node's shared mounter serves volume %s (%s: %s)",
			strings.Join(adm.NodeServed, ", "), contract.AttrMountMode, contract.MountModeShared))
	case adm.Sidecar == nil && usesDriver:
		a.add("pod", Refused, StageMount, fmt.Sprintf(
			"the webhook injects no gcsfuse sidecar (see its warnings), so the node plugin refuses the pod's volumes: the pod has no %s container, so nothing would serve them",
			contract.SidecarContainerName))
	case adm.Sidecar != nil:
		v, detail := injection(meta, adm.Sidecar, adm.Mode, adm.Existing, adm.LentBy, adm.Aliases)
		a.add("pod", v, "", detail)
		if strings.Contains(adm.Sidecar.Image, gkeSidecarImage) {
			a.add("pod", Refused, StageSidecarStart, fmt.Sprintf(
				"container %s lends the GKE driver's sidecar image %s, which does not run as this driver's sidecar: lend this driver's sidecar image, or remove the container to get the configured one",
				adm.LentBy, adm.Sidecar.Image))
		}
	}
	for _, w := range adm.Warnings {
		a.add("pod", Warning, "", "admission: "+w)
	}
	if slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == gkeTmpVolume }) && adm.Sidecar != nil {
		a.add("pod", Warning, "", fmt.Sprintf(
			"volume %s (the GKE driver's sidecar tmp volume) has no equivalent and is left unused: the sidecar's tmp volume is always the driver's own %s emptyDir, which the node plugin reaches on the node",
			gkeTmpVolume, contract.TmpVolumeName))
	}
	return nil
}

// injection describes the sidecar admission gives the pod: Mapped when one of the GKE
// driver's annotations, its sidecar container name or its buffer or cache volume is read
// as ours, Unchanged otherwise.
func injection(meta metav1.ObjectMeta, sidecar *corev1.Container, mode string, existing bool, lentBy string,
	aliases map[string]string) (Verdict, string) {
	parts := []string{fmt.Sprintf("sidecar injected (%s)", mode)}
	if existing {
		parts[0] = fmt.Sprintf("sidecar already injected (%s), kept", mode)
	}
	mapped := false
	for _, k := range slices.Sorted(maps.Keys(aliases)) {
		parts = append(parts, fmt.Sprintf("annotation %s=%s -> %s", k, meta.Annotations[k], aliases[k]))
		mapped = true
	}
	if lentBy != "" {
		parts = append(parts, fmt.Sprintf("container %s lends its image %s to the sidecar, which replaces it", lentBy, sidecar.Image))
		mapped = mapped || lentBy == contract.IncumbentSidecarContainerName
	}
	for _, vm := range sidecar.VolumeMounts {
		if vm.Name != gkeBufferVolume && vm.Name != gkeCacheVolume {
			continue
		}
		what := "write buffer"
		if vm.MountPath == contract.CacheMountPath {
			what = "file cache"
		}
		parts = append(parts, fmt.Sprintf("volume %s -> the sidecar's %s (%s)", vm.Name, what, vm.MountPath))
		mapped = true
	}
	if mapped {
		return Mapped, strings.Join(parts, "; ")
	}
	return Unchanged, strings.Join(parts, "; ")
}
