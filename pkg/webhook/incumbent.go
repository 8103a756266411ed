package webhook

import (
	"fmt"
	"sort"
	"strings"

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
// replaces it at our position.
const incumbentSidecarName = "gke-gcsfuse-sidecar"

// incumbentAnnotations are the GKE driver's annotations with an equivalent here (the same
// name after the prefix, the same meaning).
var incumbentAnnotations = map[string]bool{
	"volumes": true, "cpu-limit": true, "cpu-request": true, "memory-limit": true, "memory-request": true,
	"ephemeral-storage-limit": true, "ephemeral-storage-request": true,
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
	for _, k := range keys {
		name := strings.TrimPrefix(k, incumbentPrefix)
		if !incumbentAnnotations[name] {
			warnings = append(warnings, fmt.Sprintf("annotation %s (the GKE driver's) has no equivalent in this driver and is ignored", k))
			continue
		}
		ours := contract.AnnotationPrefix + name
		if v, ok := annotations[ours]; ok && v != annotations[k] {
			return nil, nil, badRequest("annotations %s=%q and %s=%q disagree; set one of them", k, annotations[k], ours, v)
		}
		out[ours] = annotations[k]
	}
	return out, warnings, nil
}
