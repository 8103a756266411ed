package webhook

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// policyEval evaluates the ValidatingAdmissionPolicy of deploy/ the way the API server does:
// its CEL with the Kubernetes CEL environment (the libraries and cost limits of stored
// expressions), the pod as `object`, its variables under `variables`.
type policyEval struct {
	match       []cel.Program
	variables   []string
	varPrograms []cel.Program
	validations []cel.Program
	messages    []string
}

func newPolicyEval(t *testing.T) *policyEval {
	t.Helper()
	policy, _ := loadPolicy(t)
	base, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion(), true).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err := base.Extend(cel.Variable("object", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	compile := func(expr string) cel.Program {
		t.Helper()
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("the policy's CEL %q does not compile: %v", expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		return prg
	}
	pe := &policyEval{}
	for _, c := range policy.Spec.MatchConditions {
		pe.match = append(pe.match, compile(c.Expression))
	}
	for _, v := range policy.Spec.Variables {
		pe.variables = append(pe.variables, v.Name)
		pe.varPrograms = append(pe.varPrograms, compile(v.Expression))
	}
	for _, v := range policy.Spec.Validations {
		pe.validations = append(pe.validations, compile(v.Expression))
		pe.messages = append(pe.messages, v.Message)
	}
	return pe
}

// admit returns whether the policy applies to pod and the messages of the validations it
// fails (none: admitted).
func (pe *policyEval) admit(t *testing.T, pod *corev1.Pod) (matched bool, denied []string) {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var object map[string]any
	if err := json.Unmarshal(raw, &object); err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{}
	in := map[string]any{"object": object, "variables": vars}
	eval := func(p cel.Program) bool {
		t.Helper()
		out, _, err := p.Eval(in)
		if err != nil {
			t.Fatalf("evaluation error (the API server would apply failurePolicy: Fail): %v", err)
		}
		b, ok := out.Value().(bool)
		if !ok {
			t.Fatalf("expression returned %T, want bool", out.Value())
		}
		return b
	}
	for _, p := range pe.match {
		if !eval(p) {
			return false, nil
		}
	}
	for i, p := range pe.varPrograms {
		out, _, err := p.Eval(in)
		if err != nil {
			t.Fatalf("variable %s: %v", pe.variables[i], err)
		}
		vars[pe.variables[i]] = out
	}
	for i, p := range pe.validations {
		if !eval(p) {
			denied = append(denied, strings.Join(strings.Fields(pe.messages[i]), " "))
		}
	}
	return true, denied
}

// The policy admits what the webhook injects, refuses each way a later webhook can break a
// native sidecar with the message naming it, and leaves legacy and other pods alone.
func TestValidatingPolicyCEL(t *testing.T) {
	pe := newPolicyEval(t)
	_, native := admitRaw(t, newMutator(t, modern), mustJSON(t, newPod()))
	if native == nil || native.Annotations[contract.AnnotationInjected] != contract.ModeNative {
		t.Fatalf("the webhook did not inject a native sidecar: %+v", native)
	}
	if matched, denied := pe.admit(t, native); !matched || len(denied) > 0 {
		t.Fatalf("injected native pod: matched %v, denied %q", matched, denied)
	}
	sidecar := func(p *corev1.Pod) *corev1.Container {
		i := slices.IndexFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == contract.SidecarContainerName })
		return &p.Spec.InitContainers[i]
	}
	dropEnv := func(name string) func(p *corev1.Pod) {
		return func(p *corev1.Pod) {
			c := sidecar(p)
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		}
	}
	for _, tt := range []struct {
		name   string
		break_ func(*corev1.Pod)
		want   string
	}{
		{"sidecar moved to the regular containers", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, *sidecar(p))
			p.Spec.InitContainers = nil
		}, "has no init container named gcsfuse-sidecar"},
		{"restartPolicy dropped", func(p *corev1.Pod) { sidecar(p).RestartPolicy = nil }, "lost restartPolicy: Always"},
		{"grace variable dropped", dropEnv(contract.EnvGraceSeconds), "GCSFUSE_GRACE_SECONDS"},
		{"mode variable dropped", dropEnv(contract.EnvSidecarMode), "GCSFUSE_SIDECAR_MODE=native"},
		{"mode variable changed", func(p *corev1.Pod) {
			c := sidecar(p)
			for i := range c.Env {
				if c.Env[i].Name == contract.EnvSidecarMode {
					c.Env[i].Value = contract.ModeLegacy
				}
			}
		}, "GCSFUSE_SIDECAR_MODE=native"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := native.DeepCopy()
			tt.break_(p)
			matched, denied := pe.admit(t, p)
			if !matched || len(denied) != 1 || !strings.Contains(denied[0], tt.want) {
				t.Fatalf("matched %v, denied %q; want one denial mentioning %q", matched, denied, tt.want)
			}
		})
	}
	t.Run("legacy and foreign pods are not matched", func(t *testing.T) {
		_, legacy := admitRaw(t, newMutator(t, modern), mustJSON(t, newPod(annotate(contract.AnnotationSidecarMode, contract.ModeLegacy))))
		if legacy == nil || legacy.Annotations[contract.AnnotationInjected] != contract.ModeLegacy {
			t.Fatalf("no legacy injection: %+v", legacy)
		}
		foreign := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x"}}}}
		for _, p := range []*corev1.Pod{legacy, foreign} {
			if matched, _ := pe.admit(t, p); matched {
				t.Errorf("policy matched %s", p.Name)
			}
		}
	})
}
