package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// A pod written for the GKE driver (its opt-in and resource annotations) gets our sidecar
// with the resources it asked for; an annotation of its without an equivalent is a warning;
// both spellings that disagree are a denial naming both.
func TestIncumbentAnnotations(t *testing.T) {
	gke := func(kv ...string) *corev1.Pod {
		return newPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				p.Annotations[kv[i]] = kv[i+1]
			}
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		})
	}
	t.Run("opt-in and resources", func(t *testing.T) {
		resp, out := mustAdmit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "true", "gke-gcsfuse/memory-limit", "1Gi", "gke-gcsfuse/cpu-request", "500m"))
		c, _ := sidecarOf(t, out)
		if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("1Gi")) != 0 {
			t.Errorf("memory limit = %v, want 1Gi", got.String())
		}
		if got := c.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("500m")) != 0 {
			t.Errorf("cpu request = %v, want 500m", got.String())
		}
		if len(resp.Warnings) > 0 {
			t.Errorf("warnings %q", resp.Warnings)
		}
	})
	t.Run("opt-out", func(t *testing.T) {
		resp, out := mustAdmit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "false"))
		if resp.Patch != nil || out.Annotations[contract.AnnotationInjected] != "" {
			t.Fatalf("injected: %s", resp.Patch)
		}
	})
	t.Run("no equivalent", func(t *testing.T) {
		resp, _ := mustAdmit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "true", "gke-gcsfuse/metadata-prefetch-memory-limit", "10Mi"))
		if !containsSubstring(resp.Warnings, "gke-gcsfuse/metadata-prefetch-memory-limit") {
			t.Fatalf("warnings = %q, want one naming the annotation without an equivalent", resp.Warnings)
		}
	})
	t.Run("disagreeing spellings", func(t *testing.T) {
		resp, _ := admit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "true", "gke-gcsfuse/memory-limit", "1Gi", contract.AnnotationMemoryLimit, "2Gi"))
		if resp.Allowed || !containsSubstring([]string{resp.Result.Message}, "gke-gcsfuse/memory-limit") || !containsSubstring([]string{resp.Result.Message}, contract.AnnotationMemoryLimit) {
			t.Fatalf("allowed=%v %+v, want a denial naming both annotations", resp.Allowed, resp.Result)
		}
	})
	t.Run("bad value named", func(t *testing.T) {
		resp, _ := admit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "yes"))
		if resp.Allowed {
			t.Fatal("a bad opt-in value was allowed")
		}
	})
}
