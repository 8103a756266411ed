package webhook

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

const policyFile = "../../deploy/base/webhook/validating-policy.yaml"

// loadPolicy parses the policy manifest strictly into the typed objects, so a misspelt
// field fails here rather than being dropped by the API server.
func loadPolicy(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	data, err := os.ReadFile(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		if tm.APIVersion != "admissionregistration.k8s.io/v1" {
			t.Fatalf("apiVersion = %q", tm.APIVersion)
		}
		switch tm.Kind {
		case "ValidatingAdmissionPolicy":
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict(doc, policy); err != nil {
				t.Fatalf("policy: %v", err)
			}
		case "ValidatingAdmissionPolicyBinding":
			binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict(doc, binding); err != nil {
				t.Fatalf("binding: %v", err)
			}
		default:
			t.Fatalf("unexpected kind %q", tm.Kind)
		}
	}
	if policy == nil || binding == nil {
		t.Fatalf("policy or binding missing: %v %v", policy, binding)
	}
	return policy, binding
}

func TestValidatingPolicyManifest(t *testing.T) {
	policy, binding := loadPolicy(t)

	if binding.Spec.PolicyName != policy.Name {
		t.Errorf("binding refers to %q, the policy is %q", binding.Spec.PolicyName, policy.Name)
	}
	if len(binding.Spec.ValidationActions) != 1 || binding.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
		t.Errorf("validationActions = %v, want [Deny]", binding.Spec.ValidationActions)
	}
	if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy = %v, want Fail", policy.Spec.FailurePolicy)
	}

	mc := policy.Spec.MatchConstraints
	if mc == nil || len(mc.ResourceRules) != 1 {
		t.Fatalf("matchConstraints = %+v", mc)
	}
	rule := mc.ResourceRules[0]
	if !equalStrings(rule.APIGroups, []string{""}) || !equalStrings(rule.Resources, []string{"pods"}) ||
		len(rule.Operations) != 1 || rule.Operations[0] != admissionregistrationv1.Create {
		t.Errorf("resource rule = %+v, want pod CREATE", rule.Rule)
	}

	var all []string
	for _, c := range policy.Spec.MatchConditions {
		all = append(all, c.Expression)
	}
	for _, v := range policy.Spec.Variables {
		all = append(all, v.Expression)
	}
	for _, v := range policy.Spec.Validations {
		if v.Message == "" && v.MessageExpression == "" {
			t.Errorf("validation %q has no message", v.Expression)
		}
		all = append(all, v.Expression)
	}
	if len(policy.Spec.Validations) == 0 {
		t.Fatal("no validations")
	}
	for _, e := range all {
		if strings.TrimSpace(e) == "" {
			t.Errorf("empty expression in %v", all)
		}
	}
	// The policy hard-codes the contract's names (CEL cannot import them); fail if one of
	// them is renamed in contract.go without the manifest following.
	joined := strings.Join(all, "\n")
	for _, want := range []string{
		"'" + contract.AnnotationInjected + "'",
		"'" + contract.ModeNative + "'",
		"'" + contract.SidecarContainerName + "'",
		"'" + contract.EnvGraceSeconds + "'",
		"'" + contract.EnvSidecarMode + "'",
		"'" + string(corev1.ContainerRestartPolicyAlways) + "'",
		"initContainers",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("the policy expressions do not mention %s", want)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
