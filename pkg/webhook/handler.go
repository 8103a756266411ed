package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// MaxBodyBytes bounds an AdmissionReview body. The API server caps objects at about 3 MiB
// (etcd's request limit); anything larger is not a real pod and is refused before decoding.
const MaxBodyBytes = 3 << 20

// admissionGV is the only AdmissionReview version served; the webhook configuration must
// list admissionReviewVersions: ["v1"].
var admissionGV = admissionv1.SchemeGroupVersion

// denied is a refusal whose Result carries an HTTP-level code and the reason that goes with
// it (apierrors.IsForbidden and the like read the reason): 400 for the user's mistakes, 403
// for what the pod's namespace may not have, 500 for ours.
func denied(uid types.UID, code int32, msg string) *admissionv1.AdmissionResponse {
	reason := metav1.StatusReasonBadRequest
	switch {
	case code >= 500:
		reason = metav1.StatusReasonInternalError
	case code == 403:
		reason = metav1.StatusReasonForbidden
	}
	return &admissionv1.AdmissionResponse{
		UID:     uid,
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    code,
			Reason:  reason,
			Message: msg,
		},
	}
}

// ServeHTTP serves the mutating webhook: it reads an admission.k8s.io/v1 AdmissionReview and
// answers one carrying the request's UID. A body that is not a readable AdmissionReview gets
// a plain HTTP 4xx with the reason, since there is no UID to answer.
func (m *Mutator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST is allowed", http.StatusMethodNotAllowed)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			http.Error(w, fmt.Sprintf("unsupported content type %q: expected application/json", ct), http.StatusUnsupportedMediaType)
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request body larger than %d bytes", MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, fmt.Sprintf("reading the request body: %v", err), http.StatusBadRequest)
		return
	}
	review, err := decodeReview(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := m.safeMutate(r, review.Request)
	resp.UID = review.Request.UID
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionGV.String(), Kind: "AdmissionReview"},
		Response: resp,
	})
	if err != nil {
		m.log.Error("encoding the AdmissionReview response", "error", err)
		http.Error(w, "encoding the response failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(out); err != nil {
		m.log.Debug("writing the AdmissionReview response", "error", err)
	}
	// hack/scale.sh reads these lines for the admission latency inside the webhook.
	m.log.Debug("admission served", "uid", review.Request.UID, "allowed", resp.Allowed, "us", time.Since(start).Microseconds())
}

// safeMutate runs Mutate and turns a panic into a 500 denial. No input is expected to
// panic (the fuzz test checks that); this keeps one bug from killing every in-flight
// admission and lets the API server apply the webhook's failurePolicy.
func (m *Mutator) safeMutate(r *http.Request, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	defer func() {
		if p := recover(); p != nil {
			m.log.Error("panic while mutating", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			resp = denied(req.UID, 500, "gcsfuse webhook: internal error")
		}
	}()
	return m.Mutate(r.Context(), req)
}

// decodeReview parses an AdmissionReview and checks it is one this webhook can answer.
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	review := &admissionv1.AdmissionReview{}
	if err := utiljson.Unmarshal(body, review); err != nil {
		return nil, fmt.Errorf("the body is not a JSON AdmissionReview: %v", err)
	}
	if review.APIVersion != admissionGV.String() || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("expected apiVersion %s and kind AdmissionReview, got apiVersion %q and kind %q",
			admissionGV.String(), review.APIVersion, review.Kind)
	}
	if review.Request == nil {
		return nil, errors.New("the AdmissionReview has no request")
	}
	return review, nil
}
