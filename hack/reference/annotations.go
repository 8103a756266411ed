package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/webhook"
)

// ---- pod annotations ------------------------------------------------------------------

// annotation is one of ours: a contract.Annotation* constant.
type annotation struct {
	constName string
	name      string
	what      string
	examples  []podExample
}

// podExample is a pod's annotations and whether it has an inline volume of the driver.
type podExample struct {
	annotations map[string]string
	volume      bool
	// gkeName: the driver is installed under the GKE driver's name.
	gkeName bool
}

func annotations() []annotation {
	vol := func(k, v string) podExample { return podExample{annotations: map[string]string{k: v}, volume: true} }
	res := func(constName, name, what string, values ...string) annotation {
		a := annotation{constName, name, what + " of the sidecar; only one of a request and its limit set: both; `0`: none.", nil}
		for _, v := range values {
			a.examples = append(a.examples, vol(name, v))
		}
		return a
	}
	return []annotation{
		{"AnnotationInject", contract.AnnotationInject,
			"Opts the pod in to the sidecar, or out. Not needed with a volume of the driver: such a pod gets the sidecar anyway.",
			[]podExample{{annotations: map[string]string{contract.AnnotationInject: "true"}}, vol(contract.AnnotationInject, "false"), vol(contract.AnnotationInject, "yes")}},
		{"AnnotationSidecarMode", contract.AnnotationSidecarMode,
			"The sidecar's mode: `" + contract.ModeNative + "` (an init container with restartPolicy Always) or `" + contract.ModeLegacy + "` (a regular container); absent: native where every kubelet the pod may run on is at least 1.29 (its spec.nodeName's, else those its nodeSelector and required node affinity admit, else every node); a node of an older kubelet that joins the selection later would not start such a pod: set legacy where a selection may get one.",
			[]podExample{vol(contract.AnnotationSidecarMode, contract.ModeLegacy), vol(contract.AnnotationSidecarMode, "sometimes")}},
		{"AnnotationIgnoreContainers", contract.AnnotationIgnoreContainers,
			"Containers, comma separated, that are not workload (a legacy istio-proxy): the sidecar does not wait for them to exit.",
			[]podExample{vol(contract.AnnotationIgnoreContainers, "istio-proxy,log-shipper"), vol(contract.AnnotationIgnoreContainers, "Istio_Proxy")}},
		res("AnnotationCPURequest", contract.AnnotationCPURequest, "CPU request", "250m"),
		res("AnnotationCPULimit", contract.AnnotationCPULimit, "CPU limit", "1"),
		res("AnnotationMemoryRequest", contract.AnnotationMemoryRequest, "Memory request", "256Mi", "lots"),
		res("AnnotationMemoryLimit", contract.AnnotationMemoryLimit, "Memory limit", "0"),
		res("AnnotationEphemeralStorageRequest", contract.AnnotationEphemeralStorageRequest, "Ephemeral storage request", "1Gi"),
		res("AnnotationEphemeralStorageLimit", contract.AnnotationEphemeralStorageLimit, "Ephemeral storage limit", "2Gi", "-1Gi"),
		{"AnnotationCredentialConfigMap", contract.AnnotationCredentialConfigMap,
			"A ConfigMap of the pod's namespace holding one external_account credential configuration (`gcloud iam workload-identity-pools create-cred-config`), read and checked at admission: the sidecar gets the configuration as checked (in its environment: a later edit of the ConfigMap changes nothing) and the pod's own service account token, projected where `credential_source.file` says, and every gcsfuse of the pod without an identity of its own reads with them ([credentials](credentials.md#way-4-the-gke-drivers-credential-configmap)). A shared volume, or a node plugin that federates every volume, is refused.",
			[]podExample{vol(contract.AnnotationCredentialConfigMap, exampleConfigMap), vol(contract.AnnotationCredentialConfigMap, "missing")}},
		{"AnnotationInjected", contract.AnnotationInjected,
			"Set by the webhook on the pods it injected, to the sidecar's mode; a pod that carries it and the sidecar keeps it.",
			nil},
	}
}

// fixedVersions are kubelets and an API server of 1.34, for the examples' admissions.
type fixedVersions struct{}

func (fixedVersions) ServerVersion() (*version.Version, error) {
	return version.MustParseGeneric("1.34.4"), nil
}

func (fixedVersions) MinKubeletVersion(*corev1.Pod) (*version.Version, string, error) {
	return version.MustParseGeneric("1.34.4"), "every node", nil
}

// mutators are the examples' webhooks: installed under the driver's own name, and under
// the GKE driver's.
type mutators struct{ own, gke *webhook.Mutator }

func newMutators() (mutators, error) {
	var ms mutators
	for _, c := range []struct {
		m    **webhook.Mutator
		name string
	}{{&ms.own, contract.DriverName}, {&ms.gke, contract.IncumbentDriverName}} {
		m, err := webhook.NewMutator(webhook.Config{SidecarImage: "registry.example.com/gcsfuse-csi/sidecar:v1", DriverName: c.name, ConfigMaps: exampleConfigMaps{}},
			fixedVersions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return mutators{}, err
		}
		*c.m = m
	}
	return ms, nil
}

// exampleConfigMap is the one credential ConfigMap of the examples' namespace, as
// create-cred-config writes it.
const exampleConfigMap = "wif-credentials"

// exampleConfigMaps is the examples' namespace's ConfigMaps: exampleConfigMap alone.
type exampleConfigMaps struct{}

func (exampleConfigMaps) ConfigMap(_ context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	if name != exampleConfigMap {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	return &corev1.ConfigMap{Data: map[string]string{"credential-configuration.json": `{"type": "external_account",
  "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1",
  "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": "https://sts.googleapis.com/v1/token",
  "credential_source": {"file": "/var/run/service-account/token", "format": {"type": "text"}}}`}}, nil
}

// review is the webhook's admission of a pod with the example's annotations.
func (ms mutators) review(ex podExample) (webhook.Admission, error) {
	m, driver := ms.own, contract.DriverName
	if ex.gkeName {
		m, driver = ms.gke, contract.IncumbentDriverName
	}
	pod := &corev1.Pod{}
	pod.Name = "app"
	pod.Annotations = ex.annotations
	pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "busybox"}}
	if ex.volume {
		pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
			Driver: driver, VolumeAttributes: map[string]string{contract.AttrBucketName: bucket}}}}}
	}
	return m.Review(context.Background(), pod, "default")
}

func admitted(a webhook.Admission) string {
	if a.Denied != "" {
		return "denied: " + md(a.Denied)
	}
	s := "no sidecar"
	if a.Sidecar != nil {
		s = "sidecar, " + code(a.Mode)
		if r := resources(a.Sidecar.Resources); r != "" {
			s += ", " + r
		}
	}
	for _, w := range a.Warnings {
		s += "; warning: " + md(w)
	}
	return s
}

func resources(r corev1.ResourceRequirements) string {
	list := func(l corev1.ResourceList) string {
		var parts []string
		for name, q := range l {
			parts = append(parts, string(name)+"="+q.String())
		}
		sort.Strings(parts)
		return strings.Join(parts, ",")
	}
	var parts []string
	if len(r.Requests) > 0 {
		parts = append(parts, "requests "+code(list(r.Requests)))
	}
	if len(r.Limits) > 0 {
		parts = append(parts, "limits "+code(list(r.Limits)))
	}
	return strings.Join(parts, ", ")
}

// incumbentPrefix is the GKE driver's annotation prefix, which pkg/webhook reads.
const incumbentPrefix = "gke-gcsfuse/"

func (g *gen) annotations() error {
	anns := annotations()
	var names []string
	for _, a := range anns {
		names = append(names, a.constName)
	}
	if err := g.sameNames("the pod annotations (pkg/contract Annotation* constants)", "pkg/contract",
		constNamesFunc(func(n string) bool { return strings.HasPrefix(n, "Annotation") && n != "AnnotationPrefix" }), names); err != nil {
		return err
	}
	m, err := newMutators()
	if err != nil {
		return err
	}
	g.p("")
	g.p("## Pod annotations")
	g.p("")
	g.p("Read by the webhook when the pod is created. A bad value denies the pod, naming it; an")
	g.p("unknown key under `" + contract.AnnotationPrefix + "` is admitted with a warning. The examples are")
	g.p("pods with an inline volume of the driver (unless said), admitted by a webhook without")
	g.p("resource defaults on a cluster of 1.34.")
	g.p("")
	// The webhook's warning for an unknown key of ours, with the key as NAME.
	misspelt := contract.AnnotationPrefix + "cpu-limt"
	other, err := m.review(podExample{annotations: map[string]string{misspelt: "1"}, volume: true})
	if err != nil {
		return err
	}
	var unknownWarning string
	for _, w := range other.Warnings {
		if strings.Contains(w, misspelt) {
			unknownWarning = strings.ReplaceAll(w, misspelt, "NAME")
		}
	}
	if unknownWarning == "" {
		return fmt.Errorf("the webhook admitted %s without a warning naming it", misspelt)
	}
	g.header("annotation", "example", "admission", "what it is")
	for _, a := range anns {
		// The webhook must know each of ours: it warns of an unknown one.
		known, err := m.review(podExample{annotations: map[string]string{a.name: firstValue(a)}, volume: true})
		if err != nil {
			return err
		}
		if known.Denied != "" {
			return fmt.Errorf("annotation %s: its first example is denied (%s): give it a valid one first", a.name, known.Denied)
		}
		for _, w := range known.Warnings {
			if w == strings.ReplaceAll(unknownWarning, "NAME", a.name) {
				return fmt.Errorf("the webhook does not know the annotation %s (contract.%s): %s", a.name, a.constName, w)
			}
		}
		if len(a.examples) == 0 {
			g.row(code(a.name), "", "", a.what)
		}
		for i, ex := range a.examples {
			adm, err := m.review(ex)
			if err != nil {
				return err
			}
			what := ""
			if i == 0 {
				what = a.what
			}
			shown := code(a.name + ": " + strconv.Quote(ex.annotations[a.name]))
			if !ex.volume {
				shown += " without a volume of the driver"
			}
			g.row(code(a.name), shown, admitted(adm), what)
		}
	}
	g.row(code(misspelt), code(misspelt+`: "1"`), admitted(other), "any other key under the prefix")

	g.p("")
	g.p("### The GKE driver's annotations")
	g.p("")
	g.p("Those with an equivalent here are read as it; where a pod sets both spellings they must agree.")
	g.p("`" + incumbentPrefix + "volumes` on a pod without a volume of the driver is the GKE add-on's opt-in: the")
	g.p("pod is left to the add-on, unless the driver is installed under the GKE driver's name.")
	g.p("")
	g.header("annotation", "read as", "example", "admission")
	for _, a := range anns {
		theirs := incumbentPrefix + strings.TrimPrefix(a.name, contract.AnnotationPrefix)
		probe, err := m.review(podExample{annotations: map[string]string{theirs: firstValue(a)}, volume: true})
		if err != nil {
			return err
		}
		ours, ok := probe.Aliases[theirs]
		if !ok {
			continue // no equivalent here
		}
		exs := []podExample{{annotations: map[string]string{theirs: firstValue(a)}, volume: true}}
		if a.name == contract.AnnotationInject {
			exs = []podExample{
				{annotations: map[string]string{theirs: "True"}, volume: true},
				{annotations: map[string]string{theirs: "true"}},
				{annotations: map[string]string{theirs: "true"}, gkeName: true},
				{annotations: map[string]string{theirs: "true", contract.AnnotationInject: "false"}, volume: true},
			}
		}
		for _, ex := range exs {
			adm, err := m.review(ex)
			if err != nil {
				return err
			}
			var shown []string
			for _, k := range sortedKeys(ex.annotations) {
				shown = append(shown, code(k+": "+strconv.Quote(ex.annotations[k])))
			}
			s := strings.Join(shown, ", ")
			if !ex.volume {
				s += " without a volume of the driver"
			}
			if ex.gkeName {
				s += ", the driver installed as " + code(contract.IncumbentDriverName)
			}
			g.row(code(theirs), code(ours), s, admitted(adm))
		}
	}
	other, err = m.review(podExample{annotations: map[string]string{incumbentPrefix + "NAME": "x"}, volume: true})
	if err != nil {
		return err
	}
	g.row(code(incumbentPrefix+"NAME"), "nothing", code(incumbentPrefix+`NAME: "x"`), admitted(other))
	return nil
}

// firstValue is the value of an annotation's first example ("native" without one: the
// injected mark's).
func firstValue(a annotation) string {
	if len(a.examples) == 0 {
		return contract.ModeNative
	}
	return a.examples[0].annotations[a.name]
}

func sortedKeys(m map[string]string) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
