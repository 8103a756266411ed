package webhook

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// mutatingWebhookFile is the MutatingWebhookConfiguration that hack/chart.sh generates from
// the chart (default values).
const mutatingWebhookFile = "../../deploy/base/webhook/mutating-webhook.yaml"

// TestMatchConditionsRoute evaluates both webhook entries' matchConditions the way the API
// server does, on the pod shapes that use the driver: each must reach exactly one entry (a
// pod sent to none gets no sidecar; the API server never calls the webhook for it), and a
// pod of another driver reaches only the entry that fails open.
func TestMatchConditionsRoute(t *testing.T) {
	data, err := os.ReadFile(mutatingWebhookFile)
	if err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.Unmarshal(data, &mwc); err != nil {
		t.Fatal(err)
	}
	base, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err := base.Extend(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	matches := func(w admissionregistrationv1.MutatingWebhook, pod *corev1.Pod) bool {
		raw, _ := json.Marshal(pod)
		var object map[string]any
		if err := json.Unmarshal(raw, &object); err != nil {
			t.Fatal(err)
		}
		for _, c := range w.MatchConditions {
			ast, iss := env.Compile(c.Expression)
			if iss.Err() != nil {
				t.Fatalf("%s/%s: %v", w.Name, c.Name, iss.Err())
			}
			prg, err := env.Program(ast)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := prg.Eval(map[string]any{"object": object})
			if err != nil {
				t.Fatalf("%s/%s on %s: %v", w.Name, c.Name, pod.Name, err)
			}
			if out.Value() != true {
				return false
			}
		}
		return true
	}
	vol := func(name string, src corev1.VolumeSource) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: src}
	}
	class := "gcs"
	ephemeral := corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class}}}}
	claim := corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}
	inline := corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want string // the entry it reaches: "inject", "inject-claims" or "" (none)
	}{
		{"inline volume", corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{vol("a", inline)}}}, "inject"},
		{"annotation", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.AnnotationInject: "true"}}}, "inject"},
		{"claim", corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{vol("a", claim)}}}, "inject-claims"},
		{"generic ephemeral volume", corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{vol("a", ephemeral)}}}, "inject-claims"},
		{"inline and ephemeral", corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{vol("a", inline), vol("b", ephemeral)}}}, "inject"},
		{"emptyDir only", corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{vol("a", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})}}}, ""},
		// Beside the GKE add-on (mid-migration), its pods carry gke-gcsfuse/ annotations:
		// never on the entry that fails closed, so an outage here cannot refuse them.
		{"GKE add-on's pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"gke-gcsfuse/volumes": "true"}},
			Spec: corev1.PodSpec{Volumes: []corev1.Volume{vol("a", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.IncumbentDriverName}})}}}, ""},
		{"GKE annotation and a claim", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"gke-gcsfuse/volumes": "true"}},
			Spec: corev1.PodSpec{Volumes: []corev1.Volume{vol("a", claim)}}}, "inject-claims"},
		{"GKE annotation and our inline volume", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"gke-gcsfuse/volumes": "true"}},
			Spec: corev1.PodSpec{Volumes: []corev1.Volume{vol("a", inline)}}}, "inject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pod.Name = tc.name
			var got []string
			for _, w := range mwc.Webhooks {
				if matches(w, &tc.pod) {
					got = append(got, w.Name)
				}
			}
			want := []string{}
			if tc.want != "" {
				want = []string{tc.want + "." + contract.DriverName}
			}
			if len(got) != len(want) || (len(got) == 1 && got[0] != want[0]) {
				t.Fatalf("reaches %v, want %v", got, want)
			}
		})
	}
}
