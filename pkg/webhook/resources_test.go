package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestResources(t *testing.T) {
	q := resource.MustParse
	type rl = corev1.ResourceList
	defReq := rl{corev1.ResourceCPU: q("250m"), corev1.ResourceMemory: q("256Mi"), corev1.ResourceEphemeralStorage: q("5Gi")}
	with := func(base rl, kv ...any) rl {
		out := rl{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			name := kv[i].(corev1.ResourceName)
			if kv[i+1] == nil {
				delete(out, name)
			} else {
				out[name] = q(kv[i+1].(string))
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	tests := []struct {
		name        string
		annotations []string
		wantReq     rl
		wantLim     rl
		wantDeny    []string // substrings of the denial message
	}{
		{name: "defaults", wantReq: defReq},
		{
			name:        "both given",
			annotations: []string{contract.AnnotationCPURequest, "500m", contract.AnnotationCPULimit, "2"},
			wantReq:     with(defReq, corev1.ResourceCPU, "500m"),
			wantLim:     with(nil, corev1.ResourceCPU, "2"),
		},
		{
			name:        "limit only is copied to the request",
			annotations: []string{contract.AnnotationMemoryLimit, "1Gi"},
			wantReq:     with(defReq, corev1.ResourceMemory, "1Gi"),
			wantLim:     with(nil, corev1.ResourceMemory, "1Gi"),
		},
		{
			name:        "request only is copied to the limit",
			annotations: []string{contract.AnnotationEphemeralStorageRequest, "10Gi"},
			wantReq:     with(defReq, corev1.ResourceEphemeralStorage, "10Gi"),
			wantLim:     with(nil, corev1.ResourceEphemeralStorage, "10Gi"),
		},
		{
			name:        "zero limit means unlimited",
			annotations: []string{contract.AnnotationCPULimit, "0"},
			wantReq:     with(defReq, corev1.ResourceCPU, nil),
		},
		{
			name:        "zero request with a limit",
			annotations: []string{contract.AnnotationMemoryRequest, "0", contract.AnnotationMemoryLimit, "2Gi"},
			wantReq:     with(defReq, corev1.ResourceMemory, nil),
			wantLim:     with(nil, corev1.ResourceMemory, "2Gi"),
		},
		{
			name: "everything unlimited",
			annotations: []string{contract.AnnotationCPURequest, "0", contract.AnnotationMemoryLimit, "0",
				contract.AnnotationEphemeralStorageRequest, "0", contract.AnnotationEphemeralStorageLimit, "0"},
		},
		{
			name:        "bad quantity",
			annotations: []string{contract.AnnotationMemoryLimit, "1GB!"},
			wantDeny:    []string{contract.AnnotationMemoryLimit, `"1GB!"`},
		},
		{
			name:        "negative quantity",
			annotations: []string{contract.AnnotationCPURequest, "-1"},
			wantDeny:    []string{contract.AnnotationCPURequest, `"-1"`, "negative"},
		},
		{
			name:        "request above limit",
			annotations: []string{contract.AnnotationCPURequest, "2", contract.AnnotationCPULimit, "500m"},
			wantDeny:    []string{contract.AnnotationCPURequest, `"2"`, contract.AnnotationCPULimit, "greater"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, out := admit(t, newMutator(t, modern), newPod(annotate(tt.annotations...)))
			if tt.wantDeny != nil {
				assertDenied(t, resp, tt.wantDeny...)
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result.Message)
			}
			c, _ := sidecarOf(t, out)
			if !equalResources(c.Resources.Requests, tt.wantReq) {
				t.Errorf("requests = %v, want %v", c.Resources.Requests, tt.wantReq)
			}
			if !equalResources(c.Resources.Limits, tt.wantLim) {
				t.Errorf("limits = %v, want %v", c.Resources.Limits, tt.wantLim)
			}
		})
	}
}

func TestResourceDefaultLimits(t *testing.T) {
	cfg := testConfig()
	cfg.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	_, out := mustAdmit(t, m, newPod())
	c, _ := sidecarOf(t, out)
	if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("memory limit = %v, want the default 1Gi", got.String())
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("cpu limit set although no default: %v", c.Resources.Limits)
	}
}

func TestResourceDefaultsValidate(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		name    string
		d       ResourceDefaults
		wantErr bool
	}{
		{"empty", ResourceDefaults{}, false},
		{"request below limit", ResourceDefaults{Requests: corev1.ResourceList{"cpu": q("1")}, Limits: corev1.ResourceList{"cpu": q("2")}}, false},
		{"zero limit is unlimited", ResourceDefaults{Requests: corev1.ResourceList{"cpu": q("1")}, Limits: corev1.ResourceList{"cpu": q("0")}}, false},
		{"request above limit", ResourceDefaults{Requests: corev1.ResourceList{"memory": q("2Gi")}, Limits: corev1.ResourceList{"memory": q("1Gi")}}, true},
		{"negative", ResourceDefaults{Limits: corev1.ResourceList{"memory": q("-1")}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.d.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}
