// Command reference writes docs/reference.md: every volume attribute, StorageClass
// parameter, pod annotation, mount option and chart value, from the code's own tables and
// answers, so that the reference cannot drift from the code (main_test.go fails when the
// file differs from what this prints).
//
//	go run ./hack/reference -o docs/reference.md
//
// Where it reads what:
//   - names: the constants of pkg/contract (Attr*, Ctx*, Annotation*), the GKE driver's
//     volume attributes (pkg/mountopts, incumbentAttrs) and the options Parse handles itself,
//     read from the source with go/ast, each of which must have an entry here (the
//     generator fails otherwise, naming it);
//   - what a value becomes, or why it is refused: the product code's own answers
//     (mountopts.Explain, credentials.Choose, classparams.Parse, webhook's Mutator.Review)
//     to the examples below;
//   - gcsfuse's options: mountopts.Options, the policy over gcsfuse's parameter table;
//   - chart values: values.schema.json (what each accepts), values.yaml (defaults, order
//     and the comment above each key).
//
// The short descriptions are this file's; everything else is computed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podmetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/webhook"
)

// command is how the reference is written, as its header and the drift test name it.
const command = "go run ./hack/reference -o docs/reference.md"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reference", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the reference to this file instead of stdout")
	root := fs.String("root", ".", "the repository's root")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: go run ./hack/reference [-root DIR] [-o FILE]")
		return 2
	}
	doc, err := generate(*root)
	if err != nil {
		fmt.Fprintln(stderr, "reference:", err)
		return 1
	}
	if *out == "" {
		_, err = stdout.Write(doc)
	} else {
		err = os.WriteFile(*out, doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(stderr, "reference:", err)
		return 1
	}
	return 0
}

// generate returns docs/reference.md for the repository at root.
func generate(root string) ([]byte, error) {
	g := &gen{root: root}
	g.p("# Reference")
	g.p("")
	g.p("Every volume attribute, StorageClass parameter, pod annotation, mount option and chart value")
	g.p("the driver reads, and every metric family it serves. Generated from the code by `" + command + "`; do not edit.")
	g.p("`go test ./hack/reference` fails when this file differs from what the code says. Each")
	g.p("example's result is the code's own answer to it.")
	g.p("")
	g.p("- [Volume attributes](#volume-attributes)")
	g.p("- [StorageClass parameters](#storageclass-parameters)")
	g.p("- [Pod annotations](#pod-annotations)")
	g.p("- [Mount options](#mount-options)")
	g.p("- [Chart values](#chart-values)")
	g.p("- [Metrics](#metrics)")
	for _, section := range []func() error{g.attributes, g.classParams, g.annotations, g.mountOptions, g.chartValues, g.metrics} {
		if err := section(); err != nil {
			return nil, err
		}
	}
	return g.buf.Bytes(), nil
}

type gen struct {
	root string
	buf  bytes.Buffer
}

func (g *gen) p(line string) { g.buf.WriteString(line + "\n") }

// row writes one table row of cells that are Markdown already.
func (g *gen) row(cells ...string) { g.p("| " + strings.Join(cells, " | ") + " |") }

func (g *gen) header(cells ...string) {
	g.row(cells...)
	seps := make([]string, len(cells))
	for i := range seps {
		seps[i] = "---"
	}
	g.p("|" + strings.Join(seps, "|") + "|")
}

// ---- volume attributes ----------------------------------------------------------------

// bucket is the examples' bucket, also their volume handle.
const bucket = "my-bucket"

// example is one input and, in a row, the code's answer to it.
type example struct {
	// attrs are the volume's attributes (or the pod's annotations); the first key named
	// by the entry is the one shown.
	attrs map[string]string
	// with says what else the example needs, shown beside it ("" none).
	with string
}

// attribute is one of our volume attributes: a contract.Attr* constant.
type attribute struct {
	constName string
	name      string
	what      string
	examples  []example
	// read says what the code makes of an example.
	read func(attrs map[string]string) string
}

const (
	exampleProvider = "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/my-pool/providers/my-provider"
	exampleCluster  = "https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/my-cluster"
	exampleSA       = "reader@my-project.iam.gserviceaccount.com"
)

func attributes() []attribute {
	one := func(k, v string) example { return example{attrs: map[string]string{k: v}} }
	fed := func(k, v string) example {
		return example{attrs: map[string]string{k: v, contract.AttrWorkloadIdentityProvider: exampleProvider},
			with: "with `" + contract.AttrWorkloadIdentityProvider + "`"}
	}
	return []attribute{
		{"AttrBucketName", contract.AttrBucketName,
			"The bucket. Absent: the volume handle names it (`bucket`, or `bucket:suffix` to mount one bucket twice in a pod).",
			[]example{one(contract.AttrBucketName, "other-bucket"), one(contract.AttrBucketName, "_")}, readBucket},
		{"AttrMountOptions", contract.AttrMountOptions,
			"Mount options, comma separated ([Mount options](#mount-options)), after a PersistentVolume's `mountOptions`.",
			[]example{one(contract.AttrMountOptions, "implicit-dirs,metadata-cache:ttl-secs:60"), one(contract.AttrMountOptions, "key-file=/k.json")}, readFlags},
		{"AttrFileCacheCapacity", contract.AttrFileCacheCapacity,
			"Size of gcsfuse's file cache (a quantity, `-1` for no limit): turns the cache on, in a volume the sidecar gets for it.",
			[]example{one(contract.AttrFileCacheCapacity, "10Gi"), one(contract.AttrFileCacheCapacity, "-1")}, readFlags},
		{"AttrMountMode", contract.AttrMountMode,
			"Where the volume's gcsfuse runs: `" + contract.MountModeSidecar + "` (the default: the pod's sidecar) or `" + contract.MountModeShared + "` (the node's mounter, shared by the pods of one bucket, options and identity).",
			[]example{one(contract.AttrMountMode, contract.MountModeShared), one(contract.AttrMountMode, "node")}, readMode},
		{"AttrWorkloadIdentityProvider", contract.AttrWorkloadIdentityProvider,
			"Workload Identity Federation provider (the STS audience): gcsfuse reads as the pod's own Kubernetes service account, its token exchanged there. Overrides the node plugin's `--wif-provider`.",
			[]example{one(contract.AttrWorkloadIdentityProvider, exampleProvider), one(contract.AttrWorkloadIdentityProvider, "my-provider")}, readIdentity},
		{"AttrServiceAccount", contract.AttrServiceAccount,
			"Google service account the federated identity impersonates; empty: none. Needs a provider.",
			[]example{fed(contract.AttrServiceAccount, exampleSA), one(contract.AttrServiceAccount, exampleSA)}, readIdentity},
		{"AttrTokenURL", contract.AttrTokenURL,
			"STS token exchange URL: the node plugin's `--wif-token-url` or one of its `--wif-allowed-token-urls`. Needs a provider.",
			[]example{fed(contract.AttrTokenURL, credentials.DefaultTokenURL), fed(contract.AttrTokenURL, "https://sts.example.com/v1/token")}, readIdentity},
		{"AttrGKEIdentityProvider", contract.AttrGKEIdentityProvider,
			"The GKE driver's name for the provider: a GKE cluster's identity provider URL, or a Workload Identity pool provider.",
			[]example{one(contract.AttrGKEIdentityProvider, exampleCluster), one(contract.AttrGKEIdentityProvider, exampleProvider)}, readIdentity},
		{"AttrGKEIdentityPool", contract.AttrGKEIdentityPool,
			"The GKE driver's identity pool, `PROJECT.svc.id.goog`, with a cluster's `" + contract.AttrGKEIdentityProvider + "`.",
			[]example{{attrs: map[string]string{contract.AttrGKEIdentityPool: "other-project.svc.id.goog", contract.AttrGKEIdentityProvider: exampleCluster},
				with: "with `" + contract.AttrGKEIdentityProvider + ": " + exampleCluster + "`"},
				one(contract.AttrGKEIdentityPool, "other-project.svc.id.goog")}, readIdentity},
	}
}

// kubeletKeys are the volume context keys the kubelet adds (contract.Ctx*).
var kubeletKeys = []struct{ constName, name, what string }{
	{"CtxPodName", contract.CtxPodName, "the pod's name"},
	{"CtxPodNamespace", contract.CtxPodNamespace, "the pod's namespace"},
	{"CtxPodUID", contract.CtxPodUID, "the pod's UID"},
	{"CtxSAName", contract.CtxSAName, "the pod's service account"},
	{"CtxEphemeral", contract.CtxEphemeral, "`true` for an inline volume"},
	{"CtxSATokens", contract.CtxSATokens, "the pod's service account tokens (the CSIDriver's `tokenRequests`)"},
}

// gkeAttributes are examples of each of the GKE driver's volume attributes that
// pkg/mountopts reads (incumbentAttrs): accepted ones first, then refused values.
var gkeAttributes = map[string][]string{
	"fileCacheForRangeRead":          {"true"},
	"metadataStatCacheCapacity":      {"32Mi", "-1"},
	"metadataTypeCacheCapacity":      {"64Mi"},
	"metadataCacheTTLSeconds":        {"600"},
	"metadataCacheTtlSeconds":        {"600"},
	"gcsfuseLoggingSeverity":         {"debug", "verbose"},
	"gcsfuseMetadataPrefetchOnMount": {"true", "false"},
	"skipCSIBucketAccessCheck":       {"true"},
	"enableCloudProfilerForSidecar":  {"false", "true"},
	"multiNICIndex":                  {"-1", "0"},
	"hostNetworkPodKSA":              {"true"},
	"disableMetrics":                 {"true", "false"},
}

// explain is mountopts.Explain on a volume whose handle is the example bucket.
func explain(attrs map[string]string) (*mountopts.Volume, []mountopts.Mapping, error) {
	return mountopts.Explain(attrs, nil, bucket)
}

func refused(err error) string { return "refused: " + md(err.Error()) }

func readBucket(attrs map[string]string) string {
	v, _, err := explain(attrs)
	if err != nil {
		return refused(err)
	}
	return "bucket " + code(v.Bucket)
}

func readFlags(attrs map[string]string) string {
	v, _, err := explain(attrs)
	if err != nil {
		return refused(err)
	}
	return flags(v.Flags)
}

func readMode(attrs map[string]string) string {
	shared, err := mountopts.MountMode(attrs)
	if err == nil {
		_, _, err = explain(attrs)
	}
	switch {
	case err != nil:
		return refused(err)
	case shared:
		return "gcsfuse in the node's mounter"
	}
	return "gcsfuse in the pod's sidecar"
}

func readIdentity(attrs map[string]string) string {
	if _, _, err := explain(attrs); err != nil {
		return refused(err)
	}
	c, err := credentials.Choose(credentials.Config{}.WithDefaults(), attrs, false)
	if err != nil {
		return refused(err)
	}
	s := string(c.Kind)
	if c.Provider != "" {
		s += ", provider " + code(c.Provider)
	}
	if c.ServiceAccount != "" {
		s += ", impersonating " + code(c.ServiceAccount)
	}
	if c.TokenURL != "" {
		s += ", token URL " + code(c.TokenURL)
	}
	return s
}

func flags(f []string) string {
	if len(f) == 0 {
		return "no gcsfuse flag"
	}
	return "flags " + code(strings.Join(f, " "))
}

// inClass is what classparams.Parse says of a StorageClass with the example's attributes:
// "refused likewise" when it refuses them as the volume is refused.
func inClass(attrs map[string]string) string {
	params := map[string]string{contract.AttrBucketName: bucket}
	for k, v := range attrs {
		params[k] = v
	}
	_, err := classparams.Parse(params)
	if err == nil {
		return "yes"
	}
	if _, _, verr := explain(attrs); verr != nil && strings.HasSuffix(err.Error(), verr.Error()) {
		return "refused likewise"
	}
	return refused(err)
}

func (g *gen) attributes() error {
	attrs := attributes()
	var names []string
	for _, a := range attrs {
		names = append(names, a.constName)
	}
	for _, k := range kubeletKeys {
		names = append(names, k.constName)
	}
	if err := g.sameNames("the volume attributes (pkg/contract Attr* and Ctx* constants)", "pkg/contract",
		constNamesFunc(func(n string) bool { return strings.HasPrefix(n, "Attr") || strings.HasPrefix(n, "Ctx") }), names); err != nil {
		return err
	}
	g.p("")
	g.p("## Volume attributes")
	g.p("")
	g.p("An inline volume's `volumeAttributes` or a PersistentVolume's `spec.csi.volumeAttributes`.")
	g.p("A StorageClass's parameters become them ([StorageClass parameters](#storageclass-parameters)).")
	g.p("Any other key, like any value refused below, fails the mount with a message naming it, so")
	g.p("a misspelt one is never ignored; the webhook denies a pod whose inline volume has one")
	g.p("(identity attributes excepted: they are checked at mount only). The examples are volumes")
	g.p("whose handle is `" + bucket + "`.")
	g.p("")
	g.header("attribute", "example", "the code reads it as", "as a StorageClass parameter", "what it is")
	for _, a := range attrs {
		for i, ex := range a.examples {
			what := ""
			if i == 0 {
				what = a.what
			}
			g.row(code(a.name), showExample(a.name, ex), a.read(ex.attrs), inClass(ex.attrs), what)
		}
	}
	g.p("")
	g.p("The kubelet adds these keys itself (the CSIDriver has `podInfoOnMount` and `tokenRequests`);")
	g.p("any key under `csi.storage.k8s.io/` is accepted:")
	g.p("")
	for _, k := range kubeletKeys {
		g.p("- " + code(k.name) + ": " + k.what)
	}
	return g.gkeAttributes()
}

func showExample(name string, ex example) string {
	s := code(name + ": " + ex.attrs[name])
	if ex.with != "" {
		s += " " + ex.with
	}
	return s
}

func (g *gen) gkeAttributes() error {
	keys, err := mapKeys(filepath.Join(g.root, "pkg", "mountopts"), "incumbentAttrs")
	if err != nil {
		return err
	}
	have := slices.Collect(maps.Keys(gkeAttributes))
	if err := differ("the GKE driver's volume attributes (pkg/mountopts incumbentAttrs)", keys, have); err != nil {
		return err
	}
	g.p("")
	g.p("### The GKE driver's volume attributes")
	g.p("")
	g.p("Read so that volumes written for the GKE Cloud Storage FUSE CSI driver work unchanged: each")
	g.p("becomes the gcsfuse option of the same meaning, checked as that option is, or is accepted")
	g.p("only with a value that asks for nothing here. Its `" + contract.AttrGKEIdentityProvider + "` and `" + contract.AttrGKEIdentityPool + "` are in the table above.")
	g.p("")
	g.header("attribute", "example", "becomes")
	for _, k := range keys {
		for _, v := range gkeAttributes[k] {
			g.row(code(k), code(k+": "+v), gkeBecomes(k, v))
		}
	}
	return nil
}

func gkeBecomes(k, v string) string {
	_, maps, err := explain(map[string]string{k: v})
	if err != nil {
		return refused(err)
	}
	for _, m := range maps {
		if m.From != k+"="+v {
			continue
		}
		if len(m.To) == 0 {
			return "nothing: " + md(m.Note)
		}
		return flags(m.To)
	}
	return "nothing"
}

// ---- StorageClass parameters ----------------------------------------------------------

func (g *gen) classParams() error {
	g.p("")
	g.p("## StorageClass parameters")
	g.p("")
	g.p("A StorageClass whose `provisioner` is the driver's name gives every claim a directory of")
	g.p("its own in its bucket, mounted with `only-dir`. Its parameters are the volume attributes")
	g.p("above (`" + contract.AttrBucketName + "` required; the column \"as a StorageClass parameter\"), and:")
	g.p("")
	g.header("parameter", "example", "the code reads it as")
	volume := "pvc-0123"
	for _, c := range []struct{ shown, key, value string }{
		{classparams.ParamPathPrefix, classparams.ParamPathPrefix, "claims/team-a"},
		{classparams.ParamPathPrefix, classparams.ParamPathPrefix, "claims/../x"},
		{classparams.ReservedParamPrefix + "*", classparams.ReservedParamPrefix + "provisioner-secret-name", "gcs-key"},
	} {
		params := map[string]string{contract.AttrBucketName: bucket, c.key: c.value}
		cl, err := classparams.Parse(params)
		read := ""
		if err != nil {
			read = refused(err)
		} else {
			read = "the volume " + code(volume) + " gets " + code(contract.AttrMountOptions+": "+cl.VolumeAttributes(cl.Dir(volume))[contract.AttrMountOptions])
		}
		g.row(code(c.shown), code(c.key+": "+c.value), read)
	}
	_, err := classparams.Parse(map[string]string{classparams.ParamPathPrefix: "claims"})
	if err == nil {
		return errors.New("classparams.Parse accepted a class without " + contract.AttrBucketName)
	}
	g.p("")
	g.p("Without `" + contract.AttrBucketName + "`: " + refused(err) + ".")
	return nil
}

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
			"The sidecar's mode: `" + contract.ModeNative + "` (an init container with restartPolicy Always) or `" + contract.ModeLegacy + "` (a regular container); absent: native where every kubelet is at least 1.29.",
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

func (fixedVersions) MinKubeletVersion(string) (*version.Version, error) {
	return version.MustParseGeneric("1.34.4"), nil
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

// ---- mount options --------------------------------------------------------------------

// kernelOptions are the options mountopts.Parse handles itself, not gcsfuse's: an example,
// a value it refuses (its reason says what it takes) and what the option is.
var kernelOptions = map[string]struct{ example, bad, what string }{
	"ro":            {"ro", "ro=true", "mounts read-only"},
	"rw":            {"rw", "rw=1", "mounts read-write (the default); not with `ro`"},
	"read_ahead_kb": {"read_ahead_kb=1024", "read_ahead_kb=1MiB", "the kernel's read-ahead of the mount, in KiB"},
	"noexec":        {"noexec", "noexec=1", "the kernel mount flag"},
	"noatime":       {"noatime", "noatime=1", "the kernel mount flag"},
	"nodev":         {"nodev", "nodev=1", "always applied; accepted for manifests that name it"},
	"nosuid":        {"nosuid", "nosuid=1", "always applied; accepted for manifests that name it"},
}

func (g *gen) mountOptions() error {
	names, err := switchCases(filepath.Join(g.root, "pkg", "mountopts"), "Parse", "name")
	if err != nil {
		return err
	}
	have := slices.Collect(maps.Keys(kernelOptions))
	if err := differ("the options mountopts.Parse handles itself (its switch on name)", names, have); err != nil {
		return err
	}
	g.p("")
	g.p("## Mount options")
	g.p("")
	g.p("A PersistentVolume's `spec.mountOptions` (a StorageClass's `mountOptions` become them) and the")
	g.p("`" + contract.AttrMountOptions + "` volume attribute, comma separated. Each is `name`, `name=value` (`name` a gcsfuse")
	g.p("flag without its dashes) or gcsfuse's config-file form `section:key:value`")
	g.p("(`metadata-cache:ttl-secs:60`), which becomes the flag gcsfuse's table gives that key.")
	g.p("An option not accepted below, given twice (in either form), or holding whitespace fails the")
	g.p("mount (InvalidArgument) with a message naming it.")
	g.p("")
	g.header("option", "example", "the code reads it as", "a value it refuses", "what it is")
	for _, n := range names {
		k := kernelOptions[n]
		res, err := mountopts.Parse([]string{k.example})
		if err != nil {
			return fmt.Errorf("kernel option example %q: %w", k.example, err)
		}
		_, err = mountopts.Parse([]string{k.bad})
		var oe *mountopts.Error
		if !errors.As(err, &oe) {
			return fmt.Errorf("kernel option %q: Parse accepted %q", n, k.bad)
		}
		g.row(code(n), code(k.example), readResult(res), code(k.bad)+": "+md(oe.Reason), k.what)
	}

	var accepted, refusedOpts []struct{ Flag, ConfigPath, Type, Accepts, Refused string }
	for _, o := range mountopts.Options() {
		if o.Refused == "" {
			accepted = append(accepted, o)
		} else {
			refusedOpts = append(refusedOpts, o)
		}
	}
	byName := func(list []struct{ Flag, ConfigPath, Type, Accepts, Refused string }) {
		sort.Slice(list, func(i, j int) bool { return optionName(list[i]) < optionName(list[j]) })
	}
	byName(accepted)
	byName(refusedOpts)
	g.p("")
	g.p("### gcsfuse options a volume may set")
	g.p("")
	g.p(fmt.Sprintf("From gcsfuse %s's own parameter table, through the driver's policy: %d accepted, %d refused.", mountopts.GCSFuseVersion, len(accepted), len(refusedOpts)))
	g.p("")
	g.header("option", "config-file key", "gcsfuse type", "values")
	for _, o := range accepted {
		g.row(code(o.Flag), codeOrNone(strings.ReplaceAll(o.ConfigPath, ".", ":")), code(o.Type), o.Accepts)
	}
	g.p("")
	g.p("### gcsfuse options a volume may not set")
	g.p("")
	g.header("option", "config-file key", "why")
	for _, o := range refusedOpts {
		g.row(codeOrNone(o.Flag), codeOrNone(strings.ReplaceAll(o.ConfigPath, ".", ":")), md(o.Refused))
	}
	return nil
}

func optionName(o struct{ Flag, ConfigPath, Type, Accepts, Refused string }) string {
	if o.Flag != "" {
		return o.Flag
	}
	return o.ConfigPath
}

func readResult(r *mountopts.Result) string {
	var parts []string
	if r.ReadOnly {
		parts = append(parts, "read-only")
	}
	if r.NoExec {
		parts = append(parts, code("noexec"))
	}
	if r.NoAtime {
		parts = append(parts, code("noatime"))
	}
	if r.ReadAheadKB != nil {
		parts = append(parts, fmt.Sprintf("read-ahead %d KiB", *r.ReadAheadKB))
	}
	if len(r.Flags) > 0 {
		parts = append(parts, flags(r.Flags))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}

// ---- chart values ---------------------------------------------------------------------

const chartDir = "deploy/chart/gcsfuse-csi"

func (g *gen) chartValues() error {
	rawSchema, err := os.ReadFile(filepath.Join(g.root, chartDir, "values.schema.json"))
	if err != nil {
		return err
	}
	var schema map[string]any
	if err := json.Unmarshal(rawSchema, &schema); err != nil {
		return fmt.Errorf("values.schema.json: %w", err)
	}
	rawValues, err := os.ReadFile(filepath.Join(g.root, chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	var values map[string]any
	if err := yaml.Unmarshal(rawValues, &values); err != nil {
		return fmt.Errorf("values.yaml: %w", err)
	}
	keys, err := scanValues(string(rawValues))
	if err != nil {
		return fmt.Errorf("values.yaml: %w", err)
	}
	c := &chart{defs: asMap(schema["definitions"]), comments: map[string]string{}, order: map[string]int{}}
	for i, k := range keys {
		c.comments[k.path] = k.comment
		c.order[k.path] = i
	}
	var rows [][]string
	if err := c.walk("", schema, values, false, &rows); err != nil {
		return err
	}
	for _, k := range keys {
		leaf := c.leafAbove(k.path)
		switch {
		case !c.seen[k.path] && leaf == "":
			return fmt.Errorf("values.yaml has %s, which values.schema.json does not describe", k.path)
		case leaf != "" && k.comment != "":
			return fmt.Errorf("values.yaml: the comment above %s would be lost: the reference shows %s whole; move the comment above it", k.path, leaf)
		}
	}
	g.p("")
	g.p("## Chart values")
	g.p("")
	g.p("The Helm chart's values (`" + chartDir + "`): what `values.schema.json` accepts, the default in")
	g.p("`values.yaml` and the comment above it there. Helm refuses any other key.")
	g.p("")
	g.header("value", "default", "accepts", "what it is")
	for _, r := range rows {
		g.row(r...)
	}
	return nil
}

type chart struct {
	defs     map[string]any
	comments map[string]string
	order    map[string]int
	seen     map[string]bool
	// leaves are the values shown whole (no properties in the schema), with what is under
	// them in values.yaml.
	leaves map[string]bool
}

// leafAbove is the value shown whole that path is under, "" for none.
func (c *chart) leafAbove(path string) string {
	for p := path; strings.Contains(p, "."); {
		p = p[:strings.LastIndex(p, ".")]
		if c.leaves[p] {
			return p
		}
	}
	return ""
}

// walk adds a row for every value under the schema s at path, in values.yaml's order (values
// it lacks after the others), and one for each object that has a comment there.
func (c *chart) walk(path string, s map[string]any, value any, required bool, rows *[][]string) error {
	if c.seen == nil {
		c.seen, c.leaves = map[string]bool{}, map[string]bool{}
	}
	s, err := c.resolve(s)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if path != "" {
		c.seen[path] = true
	}
	props := asMap(s["properties"])
	if len(props) == 0 {
		c.leaves[path] = true
		*rows = append(*rows, []string{code(path), defaultOf(value), c.accepts(s, required), md(c.comments[path])})
		return nil
	}
	if path != "" && c.comments[path] != "" {
		*rows = append(*rows, []string{code(path), "", "an object of the values below", md(c.comments[path])})
	}
	req := map[string]bool{}
	for _, r := range asSlice(s["required"]) {
		req[fmt.Sprint(r)] = true
	}
	var names []string
	for k := range props {
		names = append(names, k)
	}
	vals := asMap(value)
	sort.Slice(names, func(i, j int) bool {
		oi, iok := c.order[join(path, names[i])]
		oj, jok := c.order[join(path, names[j])]
		if iok != jok {
			return iok
		}
		if iok {
			return oi < oj
		}
		return names[i] < names[j]
	})
	for _, k := range names {
		v, ok := vals[k]
		if !ok {
			v = noDefault{}
		}
		if err := c.walk(join(path, k), asMap(props[k]), v, req[k], rows); err != nil {
			return err
		}
	}
	for k := range vals {
		if _, ok := props[k]; !ok {
			return fmt.Errorf("values.yaml has %s, which values.schema.json does not describe", join(path, k))
		}
	}
	return nil
}

type noDefault struct{}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func (c *chart) resolve(s map[string]any) (map[string]any, error) {
	for i := 0; i < 10; i++ {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s, nil
		}
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		if !ok || c.defs[name] == nil {
			return nil, fmt.Errorf("unknown $ref %q", ref)
		}
		s = asMap(c.defs[name])
	}
	return nil, errors.New("$ref loop")
}

// accepts says what the schema s allows, in words.
func (c *chart) accepts(s map[string]any, required bool) string {
	s, err := c.resolve(s)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	var parts []string
	if t := typeWords(s["type"]); t != "" {
		parts = append(parts, t)
	}
	if e := asSlice(s["enum"]); e != nil {
		parts = append(parts, "one of "+literals(e))
	}
	if v, ok := s["const"]; ok {
		parts = append(parts, literals([]any{v}))
	}
	parts = append(parts, bounds(s)...)
	if p, ok := s["pattern"].(string); ok {
		parts = append(parts, "matching "+code(p))
	}
	if items, ok := s["items"].(map[string]any); ok {
		what := "list of "
		if s["uniqueItems"] == true {
			what = "list of distinct "
		}
		parts = []string{what + c.accepts(items, false)}
	}
	if ap, ok := s["additionalProperties"].(map[string]any); ok {
		parts = []string{"map of keys to " + c.accepts(ap, false)}
	}
	if props := asMap(s["properties"]); len(props) > 0 {
		var names []string
		for n := range props {
			names = append(names, code(n))
		}
		sort.Strings(names)
		parts = append(parts, "keys "+strings.Join(names, ", "))
	}
	if r := asSlice(s["required"]); r != nil {
		var names []string
		for _, n := range r {
			names = append(names, code(fmt.Sprint(n)))
		}
		parts = append(parts, strings.Join(names, ", ")+" required")
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts := asSlice(s[key]); alts != nil {
			var words []string
			for _, a := range alts {
				words = append(words, c.accepts(asMap(a), false))
			}
			parts = append(parts, strings.Join(words, " or "))
		}
	}
	out := strings.Join(parts, ", ")
	if required {
		out += "; required"
	}
	return out
}

func typeWords(t any) string {
	word := func(s string) string {
		switch s {
		case "array":
			return "list"
		case "object":
			return "map"
		}
		return s
	}
	switch t := t.(type) {
	case string:
		return word(t)
	case []any:
		var w []string
		for _, x := range t {
			w = append(w, word(fmt.Sprint(x)))
		}
		return strings.Join(w, " or ")
	}
	return ""
}

func bounds(s map[string]any) []string {
	num := func(k string) (string, bool) {
		f, ok := s[k].(float64)
		if !ok {
			return "", false
		}
		return strconv.FormatFloat(f, 'f', -1, 64), true
	}
	var out []string
	lo, hasLo := num("minimum")
	hi, hasHi := num("maximum")
	switch {
	case hasLo && hasHi:
		out = append(out, "from "+lo+" to "+hi)
	case hasLo:
		out = append(out, "at least "+lo)
	case hasHi:
		out = append(out, "at most "+hi)
	}
	chars := func(n string) string {
		if n == "1" {
			return n + " character"
		}
		return n + " characters"
	}
	if n, ok := num("minLength"); ok {
		out = append(out, "at least "+chars(n))
	}
	if n, ok := num("maxLength"); ok {
		out = append(out, "at most "+chars(n))
	}
	return out
}

func literals(vals []any) string {
	var out []string
	for _, v := range vals {
		switch v := v.(type) {
		case string:
			if v == "" {
				out = append(out, code(`""`))
			} else {
				out = append(out, code(v))
			}
		default:
			b, _ := json.Marshal(v)
			out = append(out, code(string(b)))
		}
	}
	return strings.Join(out, ", ")
}

func defaultOf(v any) string {
	if _, ok := v.(noDefault); ok {
		return "none"
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "(" + err.Error() + ")"
	}
	return code(strings.TrimSpace(b.String()))
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// valueKey is a key of values.yaml, its dotted path and the comment lines right above it.
type valueKey struct{ path, comment string }

var keyLine = regexp.MustCompile(`^( *)([A-Za-z0-9_.-]+):( .*)?$`)

// scanValues lists values.yaml's keys in order with their comments. It reads the file's
// plain shape (block mappings of two-space indents, flow values), and refuses any line it
// does not understand rather than misread it: the keys it finds are then checked against
// the schema (walk).
func scanValues(text string) ([]valueKey, error) {
	type level struct {
		indent int
		key    string
	}
	var stack []level
	var pending []string
	var out []valueKey
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			pending = nil
			continue
		case strings.HasPrefix(trimmed, "#"):
			pending = append(pending, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q is not a `key: value` line (hack/reference reads plain mappings only)", i+1, line)
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		var parts []string
		for _, l := range stack {
			parts = append(parts, l.key)
		}
		parts = append(parts, m[2])
		out = append(out, valueKey{strings.Join(parts, "."), strings.Join(pending, " ")})
		pending = nil
		if strings.TrimSpace(m[3]) == "" {
			stack = append(stack, level{indent, m[2]})
		}
	}
	return out, nil
}

// ---- reading the source ---------------------------------------------------------------

// parseDir parses the non-test Go files of dir.
func parseDir(dir string) ([]*ast.File, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, af)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no Go file in %s", dir)
	}
	return out, nil
}

type constNamesFunc func(name string) bool

// sameNames checks that want, this file's entries, are exactly the package-level constants
// of dir that match.
func (g *gen) sameNames(what, dir string, match constNamesFunc, want []string) error {
	files, err := parseDir(filepath.Join(g.root, dir))
	if err != nil {
		return err
	}
	var have []string
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, sp := range gd.Specs {
				for _, n := range sp.(*ast.ValueSpec).Names {
					if n.IsExported() && match(n.Name) {
						have = append(have, n.Name)
					}
				}
			}
		}
	}
	return differ(what, have, want)
}

// differ says how the names in the code and this file's entries differ.
func differ(what string, inCode, here []string) error {
	code, mine := map[string]bool{}, map[string]bool{}
	for _, n := range inCode {
		code[n] = true
	}
	for _, n := range here {
		mine[n] = true
	}
	var msgs []string
	for _, n := range inCode {
		if !mine[n] {
			msgs = append(msgs, n+" is new: give it an entry in hack/reference/main.go")
		}
	}
	for _, n := range here {
		if !code[n] {
			msgs = append(msgs, n+" is gone from the code: drop its entry in hack/reference/main.go")
		}
	}
	if len(inCode) == 0 {
		msgs = append(msgs, "none found in the code: hack/reference reads the wrong thing")
	}
	if len(msgs) == 0 {
		return nil
	}
	sort.Strings(msgs)
	return fmt.Errorf("%s: %s", what, strings.Join(msgs, "; "))
}

// mapKeys returns the string keys of the map literal assigned to the package-level
// variable name in dir, sorted.
func mapKeys(dir, name string) ([]string, error) {
	files, err := parseDir(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, sp := range gd.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != name || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.CompositeLit)
					if !ok {
						return nil, fmt.Errorf("%s in %s is not a map literal", name, dir)
					}
					var keys []string
					for _, e := range lit.Elts {
						kv, ok := e.(*ast.KeyValueExpr)
						if !ok {
							return nil, fmt.Errorf("%s in %s: an element without a key", name, dir)
						}
						k, err := stringValue(kv.Key, files)
						if err != nil {
							return nil, fmt.Errorf("%s in %s: %w", name, dir, err)
						}
						keys = append(keys, k)
					}
					sort.Strings(keys)
					return keys, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no variable %s in %s", name, dir)
}

// switchCases returns the string cases of the switches on the variable tag in function fn
// of dir, in order.
func switchCases(dir, fn, tag string) ([]string, error) {
	files, err := parseDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	found := false
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.Name != fn || fd.Body == nil {
				continue
			}
			found = true
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				sw, ok := n.(*ast.SwitchStmt)
				if !ok {
					return err == nil
				}
				if id, ok := sw.Tag.(*ast.Ident); !ok || id.Name != tag {
					return true
				}
				for _, st := range sw.Body.List {
					for _, e := range st.(*ast.CaseClause).List {
						s, e2 := stringValue(e, files)
						if e2 != nil {
							err = e2
							return false
						}
						out = append(out, s)
					}
				}
				return true
			})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s.%s: %w", dir, fn, err)
	}
	if !found {
		return nil, fmt.Errorf("no function %s in %s", fn, dir)
	}
	return out, nil
}

// stringValue is the value of a string literal, or of a package-level string constant
// defined by one in files.
func stringValue(e ast.Expr, files []*ast.File) (string, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			return strconv.Unquote(e.Value)
		}
	case *ast.Ident:
		for _, f := range files {
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, sp := range gd.Specs {
					vs := sp.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if n.Name == e.Name && i < len(vs.Values) {
							return stringValue(vs.Values[i], files)
						}
					}
				}
			}
		}
	}
	return "", fmt.Errorf("%T at %v is not a string literal or constant", e, e.Pos())
}

// ---- Markdown -------------------------------------------------------------------------

// code is s as inline code in a table cell.
func code(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		pad = " "
	}
	return fence + pad + strings.ReplaceAll(s, "|", `\|`) + pad + fence
}

func codeOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return code(s)
}

// md is prose for a table cell: Markdown's special characters are escaped outside its
// code spans, and a pipe everywhere.
func md(s string) string {
	var b strings.Builder
	inCode := false
	for _, r := range s {
		switch {
		case r == '`':
			inCode = !inCode
		case r == '|':
			b.WriteString(`\`)
		case r == '\n':
			r = ' '
		case !inCode && strings.ContainsRune(`*<[]\~`, r):
			b.WriteString(`\`)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// metrics lists the node plugin's own families (pkg/metricscatalog, the one declaration the
// collectors are built from) and gcsfuse's it re-exports per volume (gcsfusemetrics.Families).
func (g *gen) metrics() error {
	g.p("")
	g.p("## Metrics")
	g.p("")
	g.p("What the node plugin serves on `--metrics-addr` (the chart's `node.metricsPort`), besides")
	g.p("`process_*` and `go_*` ([metrics](metrics.md) says how to scrape it and what the dashboard")
	g.p("shows). Its own families, from `pkg/metricscatalog`:")
	g.p("")
	g.header("family", "type", "labels", "served by", "what")
	if len(metricscatalog.All) == 0 {
		return errors.New("metricscatalog.All is empty")
	}
	for _, f := range metricscatalog.All {
		what := f.Help
		if f.Kind == metricscatalog.Histogram {
			what += fmt.Sprintf(" Buckets: %v.", f.Buckets)
		}
		g.row(code(f.Name), string(f.Kind), codes(f.Labels), f.Exporter, md(what))
	}
	g.p("")
	g.p("Every volume's gcsfuse, collected from its sidecar (or the node's mounter) at each scrape,")
	g.p("with the labels `" + podmetrics.LabelNamespace + "`, `" + podmetrics.LabelPod + "`, `" + gcsfusemetrics.LabelVolume + "` and `" + gcsfusemetrics.LabelBucket + "` added (`pkg/gcsfusemetrics`):")
	g.p("")
	g.header("family", "type", "gcsfuse's labels kept", "what")
	for _, name := range slices.Sorted(maps.Keys(gcsfusemetrics.Families)) {
		f := gcsfusemetrics.Families[name]
		g.row(code(name), strings.ToLower(f.Type.String()), codes(f.Labels), md(f.Help))
	}
	g.p("")
	g.p("The controller serves, on its `--metrics-addr` (the chart's `controller.metricsPort`), the")
	g.p("provisioning library's families (sig-storage-lib-external-provisioner), as `pkg/metricscatalog`")
	g.p("declares them:")
	g.p("")
	g.header("family", "type", "labels", "what")
	for _, f := range metricscatalog.ControllerFamilies {
		what := f.Help
		if f.Kind == metricscatalog.Histogram {
			what += fmt.Sprintf(" Buckets: %v.", f.Buckets)
		}
		g.row(code(f.Name), string(f.Kind), codes(f.Labels), md(what))
	}
	return nil
}

// codes is a list of names as code, "" for none.
func codes(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = code(n)
	}
	return strings.Join(out, ", ")
}
