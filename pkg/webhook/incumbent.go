package webhook

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// incumbentPrefix is the annotation prefix of the GKE GCS FUSE CSI driver. Its opt-in and
// sidecar resource annotations are read as ours, so that pods written for it work unchanged
// (docs/migration.md); where a pod sets both spellings they must agree.
const incumbentPrefix = "gke-gcsfuse/"

// The GKE driver's names for a pod's own write-buffer and file-cache volumes; the sidecar
// mounts them as it mounts contract.BufferVolumeName and contract.CacheVolumeName. (Its
// gke-gcsfuse-tmp has no equivalent: the sidecar's tmp volume is the emptyDir the node
// plugin reaches on the node, always ours.)
const (
	incumbentBufferVolume = "gke-gcsfuse-buffer"
	incumbentCacheVolume  = "gke-gcsfuse-cache"
)

// incumbentSidecarName is the GKE driver's sidecar container name. A pod written for it
// chooses a custom sidecar image with a container of that name (its "private sidecar
// image"); here such a container lends its image exactly as one named
// contract.SidecarContainerName does (findLentSidecar): only the image is kept, our sidecar
// replaces it at our position. Not while the GKE add-on may serve the pod (addOnServes):
// then it is the add-on's own sidecar, left alone.
const incumbentSidecarName = contract.IncumbentSidecarContainerName

// Side by side with the GKE add-on. During a migration the add-on's webhook still runs and
// injects its sidecar into pods annotated gke-gcsfuse/volumes: "true". Unless this driver is
// installed under the add-on's own name (then the add-on cannot be installed), this webhook
// injects only into pods that use its own volumes or carry its own annotation: the add-on's
// annotation alone on a pod whose volumes are the add-on's asks for nothing of ours, and the
// add-on's sidecar in a pod that uses the add-on is never taken for a lent image. A pod that
// uses both drivers gets each sidecar once, each serving its own volumes.

// addOnPossible reports whether the GKE add-on can be installed beside this driver.
func addOnPossible(driver string) bool { return driver != contract.IncumbentDriverName }

// addOnServes reports whether the GKE add-on may serve pod: it carries the add-on's opt-in
// annotation, or mounts an inline volume of the add-on's driver.
func addOnServes(driver string, pod *corev1.Pod) bool {
	if !addOnPossible(driver) {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(pod.Annotations[incumbentPrefix+"volumes"]), "true") {
		return true
	}
	for _, v := range pod.Spec.Volumes {
		if v.CSI != nil && v.CSI.Driver == contract.IncumbentDriverName {
			return true
		}
	}
	return false
}

// onlyAddOnOptIn reports whether the pod's only opt-in is the add-on's annotation, which
// then belongs to the add-on (addOnPossible): ours is not set.
func onlyAddOnOptIn(driver string, raw map[string]string) bool {
	_, ours := raw[contract.AnnotationInject]
	_, theirs := raw[incumbentPrefix+"volumes"]
	return addOnPossible(driver) && theirs && !ours
}

// incumbentAnnotations are the GKE driver's annotations with an equivalent here (the same
// name after the prefix, the same meaning).
var incumbentAnnotations = map[string]bool{
	"volumes": true, "cpu-limit": true, "cpu-request": true, "memory-limit": true, "memory-request": true,
	"ephemeral-storage-limit": true, "ephemeral-storage-request": true,
	"workload-identity-credential-configmap": true,
}

// withIncumbentAliases returns annotations with the GKE driver's known annotations added
// under our names, and warnings for its others, which mean nothing here. annotations is not
// modified.
func withIncumbentAliases(annotations map[string]string) (map[string]string, []string, error) {
	var keys []string
	for k := range annotations {
		if strings.HasPrefix(k, incumbentPrefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return annotations, nil, nil
	}
	sort.Strings(keys)
	out := make(map[string]string, len(annotations)+len(keys))
	for k, v := range annotations {
		out[k] = v
	}
	var warnings []string
	aliases := incumbentAliases(annotations)
	for _, k := range keys {
		ours, ok := aliases[k]
		if !ok {
			warnings = append(warnings, fmt.Sprintf("annotation %s (the GKE driver's) has no equivalent in this driver and is ignored", k))
			continue
		}
		theirs := incumbentValue(k, annotations[k])
		if v, ok := annotations[ours]; ok && v != theirs {
			return nil, nil, badRequest("annotations %s=%q and %s=%q disagree; set one of them", k, annotations[k], ours, v)
		}
		out[ours] = theirs
	}
	return out, warnings, nil
}

// incumbentValue is the value of the GKE driver's annotation k as that driver reads it:
// its webhook takes gke-gcsfuse/volumes case-insensitively ("True" and "FALSE" as well),
// where ours takes only "true" and "false"; a manifest written for it must not be denied
// here for that. Other values pass unchanged, and are checked as ours are.
func incumbentValue(k, v string) string {
	if k == incumbentPrefix+"volumes" && (strings.EqualFold(v, "true") || strings.EqualFold(v, "false")) {
		return strings.ToLower(v)
	}
	return v
}

// incumbentAliases maps each of the GKE driver's annotations in annotations that has an
// equivalent here (incumbentAnnotations) to that annotation of ours.
func incumbentAliases(annotations map[string]string) map[string]string {
	out := map[string]string{}
	for k := range annotations {
		name, ok := strings.CutPrefix(k, incumbentPrefix)
		if ok && incumbentAnnotations[name] {
			out[k] = contract.AnnotationPrefix + name
		}
	}
	return out
}
