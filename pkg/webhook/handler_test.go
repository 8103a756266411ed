package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func reviewBody(t testing.TB, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	return mustJSON(t, admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
}

func post(h http.Handler, body []byte, contentType string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, PathInject, bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decodeResponse(t testing.TB, w *httptest.ResponseRecorder) *admissionv1.AdmissionReview {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	out := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v: %s", err, w.Body)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("bad response envelope: %s", w.Body)
	}
	return out
}

func TestHandlerInjects(t *testing.T) {
	m := newMutator(t, modern)
	raw := mustJSON(t, newPod())
	w := post(m, reviewBody(t, createRequest(t, raw)), "application/json; charset=utf-8")
	out := decodeResponse(t, w)
	if out.Response.UID != "uid-1" || !out.Response.Allowed || out.Response.Patch == nil {
		t.Fatalf("response = %+v", out.Response)
	}
	patched, err := applyPatch(raw, out.Response.Patch)
	if err != nil {
		t.Fatalf("patch does not apply: %v", err)
	}
	if !strings.Contains(string(patched), contract.SidecarContainerName) {
		t.Errorf("patched pod has no sidecar: %s", patched)
	}
}

// Served over HTTP with a live cluster's lookups, a pod whose only volume of the driver is
// a generic ephemeral volume of a class the driver provisions (its claim does not exist
// yet) gets the sidecar without the annotation.
func TestHandlerInjectsForAnEphemeralVolumeOfTheDriversClass(t *testing.T) {
	cfg := testConfig()
	cfg.Claims = KubeVolumeClaims{Client: fake.NewClientset(storageClass("gcs", contract.DriverName, gcsParams, false, 100))}
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	raw := mustJSON(t, newPod(func(p *corev1.Pod) {
		delete(p.Annotations, contract.AnnotationInject)
		p.Spec.Volumes = []corev1.Volume{ephemeralVolume("data", ptr("gcs"))}
	}))
	out := decodeResponse(t, post(m, reviewBody(t, createRequest(t, raw)), "application/json"))
	if !out.Response.Allowed || out.Response.Patch == nil || len(out.Response.Warnings) > 0 {
		t.Fatalf("response = %+v", out.Response)
	}
	patched, err := applyPatch(raw, out.Response.Patch)
	if err != nil {
		t.Fatalf("patch does not apply: %v", err)
	}
	pod := &corev1.Pod{}
	if err := utiljson.Unmarshal(patched, pod); err != nil {
		t.Fatal(err)
	}
	if c, isInit := sidecarOf(t, pod); !isInit || c.RestartPolicy == nil {
		t.Errorf("sidecar %s is not a native sidecar", c.Name)
	}
	if pod.Annotations[contract.AnnotationInjected] != contract.ModeNative || !hasVolume(pod, contract.CacheVolumeName) {
		t.Errorf("annotations %v, cache volume %v: want %s and the class's file cache", pod.Annotations, hasVolume(pod, contract.CacheVolumeName), contract.ModeNative)
	}
}

func TestHandlerDenialIsAReview(t *testing.T) {
	m := newMutator(t, modern)
	raw := mustJSON(t, newPod(annotate(contract.AnnotationSidecarMode, "sometimes")))
	out := decodeResponse(t, post(m, reviewBody(t, createRequest(t, raw)), "application/json"))
	if out.Response.UID != "uid-1" || out.Response.Allowed || out.Response.Result.Code != 400 {
		t.Fatalf("response = %+v", out.Response)
	}
	if !strings.Contains(out.Response.Result.Message, contract.AnnotationSidecarMode) {
		t.Errorf("message %q does not name the annotation", out.Response.Result.Message)
	}
}

func TestHandlerRejectsBadRequests(t *testing.T) {
	m := newMutator(t, modern)
	valid := reviewBody(t, createRequest(t, mustJSON(t, newPod())))
	tests := []struct {
		name        string
		method      string
		body        []byte
		contentType string
		wantCode    int
		wantMessage string
	}{
		{"GET", http.MethodGet, nil, "", http.StatusMethodNotAllowed, "POST"},
		{"not JSON", http.MethodPost, []byte("hello"), "application/json", http.StatusBadRequest, "not a JSON AdmissionReview"},
		{"empty body", http.MethodPost, nil, "application/json", http.StatusBadRequest, "not a JSON AdmissionReview"},
		{"wrong content type", http.MethodPost, valid, "text/plain", http.StatusUnsupportedMediaType, "text/plain"},
		{"v1beta1 review", http.MethodPost, []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`), "", http.StatusBadRequest, "v1beta1"},
		{"no request", http.MethodPost, []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), "", http.StatusBadRequest, "no request"},
		{"too large", http.MethodPost, append(append([]byte(`{"a":"`), bytes.Repeat([]byte("x"), MaxBodyBytes)...), '"', '}'), "", http.StatusRequestEntityTooLarge, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, PathInject, bytes.NewReader(tt.body))
			if tt.contentType != "" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			w := httptest.NewRecorder()
			m.ServeHTTP(w, r)
			if w.Code != tt.wantCode {
				t.Fatalf("HTTP %d, want %d: %s", w.Code, tt.wantCode, w.Body)
			}
			if !strings.Contains(w.Body.String(), tt.wantMessage) {
				t.Errorf("body %q does not mention %q", w.Body, tt.wantMessage)
			}
		})
	}
}

// panicVersions makes the mutator panic, to check that the handler still answers.
type panicVersions struct{ fakeVersions }

func (panicVersions) ServerVersion() (*version.Version, error) { panic("boom") }

func TestHandlerRecoversFromPanic(t *testing.T) {
	m := newMutator(t, panicVersions{})
	out := decodeResponse(t, post(m, reviewBody(t, createRequest(t, mustJSON(t, newPod()))), ""))
	if out.Response.UID != "uid-1" || out.Response.Allowed || out.Response.Result.Code != 500 {
		t.Fatalf("response = %+v, want a 500 denial with the UID", out.Response)
	}
}

// FuzzAdmissionReview feeds arbitrary bodies to the handler. Whatever the input, the handler
// must not panic (a recovered panic shows as a 500 and fails too), must answer a readable
// review with the request's UID or a 4xx with a reason, and any patch it returns must apply
// to the object it was computed for.
func FuzzAdmissionReview(f *testing.F) {
	f.Add(reviewBody(f, createRequest(f, mustJSON(f, newPod()))))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":null}}`))
	m := newMutator(f, modern)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := post(m, body, "application/json")
		switch w.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if strings.TrimSpace(w.Body.String()) == "" {
				t.Fatalf("HTTP %d without a message", w.Code)
			}
			return
		default:
			t.Fatalf("HTTP %d: %s", w.Code, w.Body)
		}
		in := &admissionv1.AdmissionReview{}
		if err := utiljson.Unmarshal(body, in); err != nil {
			t.Fatalf("handler accepted a body that does not decode: %v", err)
		}
		out := decodeResponse(t, w)
		if out.Response.UID != in.Request.UID {
			t.Fatalf("UID %q, want %q", out.Response.UID, in.Request.UID)
		}
		if r := out.Response.Result; r != nil && r.Code >= 500 {
			t.Fatalf("internal error (a recovered panic?): %s", r.Message)
		}
		if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Message == "") {
			t.Fatal("denial without a message")
		}
		if out.Response.Patch != nil {
			if !out.Response.Allowed {
				t.Fatal("denial with a patch")
			}
			if _, err := applyPatch(in.Request.Object.Raw, out.Response.Patch); err != nil {
				t.Fatalf("patch %s does not apply to %s: %v", out.Response.Patch, in.Request.Object.Raw, err)
			}
		}
	})
}

// FuzzPodObject fuzzes the pod inside a well-formed review, where FuzzAdmissionReview mostly
// stops at the JSON envelope. It checks the same properties, and that a patched pod is left
// alone by a second admission (no second sidecar, whatever the pod looked like).
func FuzzPodObject(f *testing.F) {
	istio := corev1.ContainerRestartPolicyAlways
	for _, p := range []*corev1.Pod{
		newPod(),
		newPod(annotate(contract.AnnotationSidecarMode, "legacy", contract.AnnotationMemoryLimit, "1Gi")),
		newPod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "istio-proxy", RestartPolicy: &istio}, {Name: contract.SidecarContainerName, Image: "x/y:z"}}
			p.Spec.Volumes = append(p.Spec.Volumes, gcsVolume("c", map[string]string{contract.AttrFileCacheCapacity: "1Gi"}))
		}),
	} {
		f.Add(mustJSON(f, p))
	}
	f.Add([]byte(`{"metadata":{"annotations":{"gcsfuse.csi.storage/volumes":"true"}},"spec":{"containers":[null]}}`))
	m := newMutator(f, modern)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return // the API server only sends JSON objects; FuzzAdmissionReview covers the rest
		}
		req := createRequest(t, raw)
		w := post(m, reviewBody(t, req), "application/json")
		if w.Code == http.StatusRequestEntityTooLarge {
			return
		}
		out := decodeResponse(t, w)
		if out.Response.UID != req.UID {
			t.Fatalf("UID %q", out.Response.UID)
		}
		if r := out.Response.Result; r != nil && r.Code >= 500 {
			t.Fatalf("internal error: %s", r.Message)
		}
		if out.Response.Patch == nil {
			return
		}
		// reviewBody re-encodes raw; compact it the same way before patching.
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			t.Fatalf("patched a pod that is not JSON: %v", err)
		}
		patched, err := applyPatch(compact.Bytes(), out.Response.Patch)
		if err != nil {
			t.Fatalf("patch %s does not apply to %s: %v", out.Response.Patch, raw, err)
		}
		again := m.Mutate(context.Background(), createRequest(t, patched))
		if !again.Allowed || again.Patch != nil {
			t.Fatalf("second admission of %s: allowed=%v patch=%s result=%+v", patched, again.Allowed, again.Patch, again.Result)
		}
	})
}
