package webhook

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// reinvoked handles a pod that already has our sidecar. A later webhook may have added init
// containers since the sidecar was placed (that is why it re-invokes us), so what depends
// on them is checked again: a native sidecar's contract.EnvInitContainers and
// contract.EnvSidecarUsers are brought up to date, and a legacy pod that now has an init
// container reading the bucket is refused like at the first call. Nothing else is touched;
// an unchanged pod gets no patch.
func (m *Mutator) reinvoked(pod *corev1.Pod, opts podOptions, ours driverVolumes) ([]patchOp, error) {
	for i, c := range pod.Spec.InitContainers {
		if c.Name == contract.SidecarContainerName {
			return usersEnvOps(i, c, pod.Spec.InitContainers[i+1:], ours), nil
		}
	}
	choice := chooseMode(m.versions, pod, opts.forcedMode)
	if choice.mode != contract.ModeLegacy {
		// A copy of a legacy pod, made where native sidecars were not supported.
		choice = modeChoice{mode: contract.ModeLegacy, legacyReason: fmt.Sprintf(
			"the pod already has a regular %s container (annotation %s: %s)",
			contract.SidecarContainerName, contract.AnnotationInjected, opts.injected)}
	}
	_, err := checkLegacyInit(pod, pod.Spec.InitContainers, ours, choice, m.versions)
	return nil, err
}

// usersEnv are the native sidecar's variables naming the containers after it (after) that
// use the mounts, through the one codec lifecycle reads them back with (lifecycle.Users:
// contract.EnvInitContainers, contract.EnvSidecarUsers, in that order, with an empty Value
// when there are none). A reader through a claim of the driver's (bound to one of its
// PersistentVolumes, or of a class it provisions) counts like one of an inline volume.
func usersEnv(after []corev1.Container, ours driverVolumes) []corev1.EnvVar {
	return lifecycle.FindUsers(after, func(c corev1.Container) bool { return mountsAny(c, ours) }).Env()
}

// usersEnvOps brings usersEnv of the native sidecar at index i of the init containers up to
// date: a variable that differs is replaced, one that is no longer needed removed, a
// missing one added. The operations are computed one after the other on a copy of the
// env, so that the index of a later one accounts for an earlier removal, as when the API
// server applies them in order. The sidecar's env is never emptied (hasInjectedSidecar
// found our contract.EnvSidecarMode in it).
func usersEnvOps(i int, sidecar corev1.Container, after []corev1.Container, ours driverVolumes) []patchOp {
	env := slices.Clone(sidecar.Env)
	path := fmt.Sprintf("/spec/initContainers/%d/env", i)
	var ops []patchOp
	wants := usersEnv(after, ours)
	for _, name := range lifecycle.UsersEnvNames {
		k := slices.IndexFunc(wants, func(e corev1.EnvVar) bool { return e.Name == name })
		j := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
		switch {
		case j < 0 && k < 0:
		case j < 0:
			ops = append(ops, addOp(path+"/-", wants[k]))
			env = append(env, wants[k])
		case k < 0:
			ops = append(ops, removeOp(fmt.Sprintf("%s/%d", path, j)))
			env = slices.Delete(env, j, j+1)
		case env[j].Value != wants[k].Value || env[j].ValueFrom != nil:
			ops = append(ops, replaceOp(fmt.Sprintf("%s/%d", path, j), wants[k]))
			env[j] = wants[k]
		}
	}
	return ops
}

// hasInjectedSidecar reports whether the pod has a sidecar carrying our env marker.
func hasInjectedSidecar(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name != contract.SidecarContainerName {
				continue
			}
			for _, e := range c.Env {
				if e.Name == contract.EnvSidecarMode {
					return true
				}
			}
		}
	}
	return false
}

// lentSidecar is a container the user named contract.SidecarContainerName (or the GKE
// driver's incumbentSidecarName) to choose the sidecar image. Only its image is kept: the
// rest of our spec replaces it, at our position.
type lentSidecar struct {
	found        bool
	name         string
	image        string
	initIndex    int // -1 when not among the init containers
	regularIndex int // -1 when not among the containers
}

// findLentSidecar finds the container that lends the sidecar's image; one named
// incumbentSidecarName counts only with lendIncumbent (else it is the GKE add-on's own).
func findLentSidecar(pod *corev1.Pod, lendIncumbent bool) (lentSidecar, error) {
	l := lentSidecar{initIndex: -1, regularIndex: -1}
	count := map[string]int{}
	for i, c := range pod.Spec.InitContainers {
		if isLentName(c.Name, lendIncumbent) {
			l.found, l.name, l.image, l.initIndex = true, c.Name, c.Image, i
			count[c.Name]++
		}
	}
	for i, c := range pod.Spec.Containers {
		if isLentName(c.Name, lendIncumbent) {
			l.found, l.name, l.image, l.regularIndex = true, c.Name, c.Image, i
			count[c.Name]++
		}
	}
	if count[contract.SidecarContainerName] > 0 && count[incumbentSidecarName] > 0 {
		return lentSidecar{}, badRequest("the pod has containers named both %s and %s (the GKE driver's name): each lends the sidecar's image, so it is unclear which to use; keep one",
			contract.SidecarContainerName, incumbentSidecarName)
	}
	for name, n := range count {
		if n > 1 {
			return lentSidecar{}, badRequest("the pod has %d containers named %s; container names must be unique", n, name)
		}
	}
	return l, nil
}

// isLentName reports whether a container of the pod's own with this name lends the
// sidecar's image (findLentSidecar) and so is a placeholder, not a workload container. One
// named incumbentSidecarName does only with lendIncumbent (else it is the GKE add-on's own).
func isLentName(name string, lendIncumbent bool) bool {
	return name == contract.SidecarContainerName || (lendIncumbent && name == incumbentSidecarName)
}

func mountsAny(c corev1.Container, ours driverVolumes) bool {
	for _, m := range c.VolumeMounts {
		if ours.has(m.Name) {
			return true
		}
	}
	return false
}

// nativeIndex is where the native sidecar goes among the init containers: at the front, or
// right after a native istio-proxy (gcsfuse needs its network) when that proxy comes before
// the first init container mounting one of our volumes. That container needs the sidecar
// already running, so the sidecar never goes after it; if istio-proxy only starts later,
// the sidecar stays at the front and does without the mesh.
func nativeIndex(init []corev1.Container, ours driverVolumes) int {
	firstUser := len(init)
	for i, c := range init {
		if mountsAny(c, ours) {
			firstUser = i
			break
		}
	}
	for i, c := range init {
		if c.Name == istioProxyName && i < firstUser {
			return i + 1
		}
	}
	return 0
}

// legacyIndex is where the legacy sidecar goes among the containers: first, so that the
// kubelet starts it before the workload, or right after istio-proxy.
func legacyIndex(containers []corev1.Container) int {
	for i, c := range containers {
		if c.Name == istioProxyName {
			return i + 1
		}
	}
	return 0
}

// checkLegacyInit refuses a legacy pod whose regular (run-to-completion) init containers
// mount one of our volumes. The legacy sidecar is a regular container, which the kubelet
// starts only after every init container has completed, so such an init container waits
// for a gcsfuse that never comes and the pod stays Pending forever. The webhook cannot make
// that pod work (it does not override the user's or the cluster's choice of mode), so the
// denial says why the sidecar is legacy and what the user can change.
//
// Init containers with restartPolicy: Always (the user's own native sidecars) do not hold
// back the next ones once started, so they only get a warning: their reads of the bucket
// wait until the legacy sidecar starts.
//
// ours are the volumes of driverUsage: inline CSI volumes of our driver, claims bound or
// pre-bound (claimRef) to its PersistentVolumes, and claims and generic ephemeral volumes
// of a StorageClass it provisions. A claim not bound yet without such a volume or class
// (none, or one that provisions nothing) cannot be told apart and is admitted (with a
// warning from usage.injectedWarnings when an init container mounts it).
func checkLegacyInit(pod *corev1.Pod, init []corev1.Container, ours driverVolumes, choice modeChoice, cv ClusterVersions) ([]string, error) {
	var blocked, warnings []string
	for _, c := range init {
		vols := mountedOf(c, ours)
		if len(vols) == 0 {
			continue
		}
		if isRestartable(c) {
			warnings = append(warnings, fmt.Sprintf(
				"init container %s mounts gcsfuse volume %s, but the sidecar is a regular (legacy) container that starts after the init containers: its reads of the bucket wait until then",
				c.Name, strings.Join(vols, ", ")))
			continue
		}
		blocked = append(blocked, fmt.Sprintf("%s (volume %s)", c.Name, strings.Join(vols, ", ")))
	}
	if len(blocked) == 0 {
		return warnings, nil
	}
	var cause, remedy string
	if choice.forced {
		cause = fmt.Sprintf("the annotation %s: %s makes the sidecar a regular container",
			contract.AnnotationSidecarMode, contract.ModeLegacy)
		remedy = fmt.Sprintf("Remove the annotation %s (or set it to %s): a native sidecar starts before the init containers and serves them.",
			contract.AnnotationSidecarMode, contract.ModeNative)
		if ok, reason, err := nativeSupported(cv, pod); err == nil && !ok {
			remedy += fmt.Sprintf(" But %s, and native sidecars need Kubernetes %s or newer: until then, move the bucket access out of the init containers into a regular container.",
				reason, nativeSidecarMinVersion)
		}
	} else {
		cause = "the sidecar has to be a regular (legacy) container because " + choice.legacyReason
		remedy = fmt.Sprintf("Move the bucket access out of the init containers into a regular container, "+
			"or run the pod on nodes at Kubernetes %[1]s or newer (the API server too), where the sidecar is native and serves init containers: "+
			"the webhook picks native by itself when every node the pod may run on is at %[1]s or newer "+
			"(its spec.nodeName's, else those its nodeSelector and required node affinity admit, else every node); "+
			"the annotation %[2]s: %[3]s forces it.",
			nativeSidecarMinVersion, contract.AnnotationSidecarMode, contract.ModeNative)
		if choice.versionsUnknown {
			remedy += " Creating the pod again may also work once the webhook can read the versions."
		}
	}
	what := "init container"
	if len(blocked) > 1 {
		what += "s"
	}
	return nil, badRequest("the gcsfuse sidecar cannot serve %s %s: %s, and a regular container starts only after every init container has completed, so the pod would stay Pending forever. %s",
		what, strings.Join(blocked, ", "), cause, remedy)
}

// mountedOf returns the names of the volumes in names that c mounts, once each, in the
// order of c's mounts.
func mountedOf(c corev1.Container, ours driverVolumes) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if ours.has(m.Name) && !seen[m.Name] {
			seen[m.Name] = true
			out = append(out, m.Name)
		}
	}
	return out
}

// isRestartable reports whether an init container is a native sidecar (restartPolicy:
// Always), which keeps running alongside the next containers instead of completing.
func isRestartable(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}
