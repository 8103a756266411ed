package main

import (
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

func TestParseFlags(t *testing.T) {
	required := []string{"--tls-cert-file=c", "--tls-key-file=k", "--sidecar-image=gcr.io/p/sidecar:v1"}
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, o options)
	}{
		{
			name: "defaults",
			args: required,
			check: func(t *testing.T, o options) {
				if o.listen != ":9443" || o.kubeconfig != "" || o.versionRefresh != 10*time.Minute {
					t.Errorf("options = %+v", o)
				}
				// client-go's 5 requests a second throttled every admission of a pod with
				// a claim to 400 ms once 10 had been made (hack/admission.sh).
				if o.apiQPS < 500 || o.apiBurst < 1000 {
					t.Errorf("API client limit %v/s, burst %d by default: admissions wait on the client's own limiter", o.apiQPS, o.apiBurst)
				}
				want := corev1.ResourceList{
					corev1.ResourceCPU:              resource.MustParse("100m"),
					corev1.ResourceMemory:           resource.MustParse("128Mi"),
					corev1.ResourceEphemeralStorage: resource.MustParse("5Gi"),
				}
				if !equal(o.config.Resources.Requests, want) {
					t.Errorf("requests = %v, want %v", o.config.Resources.Requests, want)
				}
				if lim := (corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}); !equal(o.config.Resources.Limits, lim) {
					t.Errorf("limits = %v, want %v", o.config.Resources.Limits, lim)
				}
			},
		},
		{
			name: "limits and zero request",
			args: append([]string{"--sidecar-memory-limit=1Gi", "--sidecar-cpu-request=0", "--listen=127.0.0.1:8443"}, required...),
			check: func(t *testing.T, o options) {
				if _, ok := o.config.Resources.Requests[corev1.ResourceCPU]; ok {
					t.Error("cpu request 0 is set")
				}
				if q := o.config.Resources.Limits[corev1.ResourceMemory]; q.String() != "1Gi" {
					t.Errorf("memory limit = %s", q.String())
				}
				if o.listen != "127.0.0.1:8443" {
					t.Errorf("listen = %s", o.listen)
				}
			},
		},
		{name: "missing required", args: nil, wantErr: "--sidecar-image, --tls-cert-file, --tls-key-file"},
		{name: "bad quantity", args: append([]string{"--sidecar-cpu-limit=lots"}, required...), wantErr: "--sidecar-cpu-limit"},
		{name: "negative quantity", args: append([]string{"--sidecar-memory-request=-1"}, required...), wantErr: "negative"},
		{name: "request above limit", args: append([]string{"--sidecar-memory-limit=64Mi"}, required...), wantErr: "greater than"},
		{name: "driver name not allowlisted", args: append([]string{"--driver-name=efs.csi.aws.com"}, required...), wantErr: "--driver-name"},
		{
			name: "the GKE driver's name",
			args: append([]string{"--driver-name=gcsfuse.csi.storage.gke.io"}, required...),
			check: func(t *testing.T, o options) {
				if o.config.DriverName != "gcsfuse.csi.storage.gke.io" {
					t.Errorf("driver name = %q", o.config.DriverName)
				}
			},
		},
		{name: "negative API rate", args: append([]string{"--kube-api-qps=-1"}, required...), wantErr: "--kube-api-qps"},
		{name: "negative shutdown delay", args: append([]string{"--shutdown-delay=-1s"}, required...), wantErr: "--shutdown-delay"},
		{name: "bad log level", args: append([]string{"--log-level=loud"}, required...), wantErr: "--log-level"},
		{name: "stray argument", args: append(required, "extra"), wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
}

func equal(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func TestRestConfigOutsideCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := restConfig(""); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("err = %v, want a hint about --kubeconfig", err)
	}
	if _, err := restConfig("/does/not/exist"); err == nil {
		t.Error("a missing kubeconfig was accepted")
	}
}

// The limits reach the client client-go builds: with 0 it never waits on a limiter of its
// own (1,000 requests at once pass), with a rate its burst bounds them.
func TestAPILimits(t *testing.T) {
	for _, tc := range []struct {
		qps   float64
		burst int
		pass  int
	}{{0, 100, 1000}, {defaultAPIQPS, defaultAPIBurst, defaultAPIBurst}} {
		cfg := &rest.Config{Host: "https://127.0.0.1:1"}
		apiLimits(cfg, tc.qps, tc.burst)
		cfg.GroupVersion = &corev1.SchemeGroupVersion
		cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
		c, err := rest.RESTClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rl := c.GetRateLimiter()
		passed := 0
		for range 1000 {
			if rl.TryAccept() {
				passed++
			}
		}
		if passed != tc.pass {
			t.Errorf("qps %v burst %d: %d of 1000 requests at once passed, want %d", tc.qps, tc.burst, passed, tc.pass)
		}
	}
}
