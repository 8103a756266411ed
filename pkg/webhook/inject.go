// Package webhook is the mutating admission webhook that adds the gcsfuse sidecar to the pods
// that use the driver (an inline volume, a claim bound to one of its volumes, or a claim or
// generic ephemeral volume of a StorageClass it provisions: claims.go) or opt in with the contract.AnnotationInject annotation,
// unless the node's shared mounter serves every volume of the driver the pod has
// (mountMode: shared, shared.go): such a pod is admitted unchanged, our annotations on it
// ignored with a warning.
//
// The sidecar is injected as a native sidecar (an init container with restartPolicy: Always)
// when the API server and every kubelet the pod can land on support it, so that it starts
// before and stops after the workload; otherwise as a regular container (the legacy mode).
// Every bad value in one of our annotations is a denial with a message naming it, so a typo
// never silently turns into a default, and a legacy pod whose init containers mount one of
// our volumes is refused with the reason: it would stay Pending forever (checkLegacyInit).
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// istioProxyName is the container name of Istio's proxy. In legacy mode the sidecar goes
// right after it: gcsfuse needs the network from its first request, and with Istio the
// network works only once the proxy has started.
const istioProxyName = "istio-proxy"

// Config is the operator's configuration of the injected sidecar.
type Config struct {
	// SidecarImage is the image of the sidecar, unless the pod lends its own through a
	// container named contract.SidecarContainerName (or the GKE driver's
	// incumbentSidecarName).
	SidecarImage string
	// Resources are the defaults for resources that the pod's annotations do not set.
	Resources ResourceDefaults
	// Policy reads the namespace's ResourceQuotas and LimitRanges, to which the sidecar's
	// resources are fitted (quotarules.go); nil: the sidecar gets the plain defaults.
	Policy NamespacePolicy
	// Claims resolves persistentVolumeClaim and generic ephemeral volumes (when not bound
	// yet, through the volume whose claimRef names the claim, else their StorageClass), so
	// that a pod using the driver through a claim gets the sidecar without the annotation;
	// nil: only inline volumes are seen.
	Claims VolumeClaims
	// ConfigMaps reads the credential ConfigMap a pod names
	// (contract.AnnotationCredentialConfigMap); nil: such a pod is refused.
	ConfigMaps ConfigMaps
	// CredentialTokenURLs are the STS endpoints a credential ConfigMap may name besides
	// Google's (--credential-token-urls): an STS of the cluster's own.
	CredentialTokenURLs []string
	// DriverName is the CSI driver name the driver is installed under (one of
	// contract.DriverNames): inline volumes and PersistentVolumes of this driver are ours.
	// Empty: contract.DriverName.
	DriverName string
	// SharedADC are the namespaces whose shared volumes may read with the node's mounter's
	// Application Default Credentials (the node plugin's --shared-adc-namespaces, the same
	// chart value); SharedFederated says the node plugin federates every shared volume
	// without an identity of its own (--wif-provider or --shared-wif-provider), so that none
	// reads with them. checkSharedIdentity.
	SharedADC       credentials.SharedADC
	SharedFederated bool
	// NodeFederated says the node plugin federates every volume without an identity of its
	// own (--wif-provider): a hostNetwork pod's sidecar then never reads as the node, and
	// checkHostNetworkIdentity refuses nothing.
	NodeFederated bool
	// SidecarPullSecrets are Secret names added to an injected pod's imagePullSecrets (those
	// it does not list yet), for a SidecarImage in a private registry. A Secret is
	// namespaced: each namespace with such pods needs one of that name (the kubelet pulls
	// without a missing one and says so in an Event). Not added when the pod lends its own
	// sidecar image.
	SidecarPullSecrets []string
}

// Mutator computes the JSON patch that injects the sidecar into a pod.
type Mutator struct {
	cfg      Config
	versions ClusterVersions
	log      *slog.Logger
}

// NewMutator checks cfg and returns a Mutator. versions decides between native and legacy
// sidecars; log may be nil for slog.Default().
func NewMutator(cfg Config, versions ClusterVersions, log *slog.Logger) (*Mutator, error) {
	if err := validateImageReference(cfg.SidecarImage); err != nil {
		return nil, fmt.Errorf("sidecar image %q: %w", cfg.SidecarImage, err)
	}
	if err := cfg.Resources.Validate(); err != nil {
		return nil, fmt.Errorf("sidecar resource defaults: %w", err)
	}
	for _, name := range cfg.SidecarPullSecrets {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return nil, fmt.Errorf("sidecar image pull secret %q: %s", name, strings.Join(errs, "; "))
		}
	}
	if versions == nil {
		return nil, errors.New("no ClusterVersions given")
	}
	if cfg.DriverName == "" {
		cfg.DriverName = contract.DriverName
	}
	if err := contract.ValidateDriverName(cfg.DriverName); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Mutator{cfg: cfg, versions: versions, log: log}, nil
}

// Mutate answers one admission request. Anything that is not the creation of a pod, and any
// pod that did not opt in, is allowed unchanged. The response always carries req.UID.
func (m *Mutator) Mutate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req == nil {
		return denied("", 400, "the AdmissionReview has no request")
	}
	if !isPodCreate(req) {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	}
	// Case-sensitive, like the API server: encoding/json would read "Metadata" as
	// "metadata", and the patch computed from that pod would not apply to the real object.
	pod := &corev1.Pod{}
	if err := utiljson.Unmarshal(req.Object.Raw, pod); err != nil {
		return denied(req.UID, 400, fmt.Sprintf("decoding the pod: %v", err))
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	log := m.log.With("namespace", req.Namespace, "pod", name, "uid", string(req.UID))

	d, err := m.inject(ctx, pod, req.Namespace)
	if err != nil {
		var bad *badRequestError
		if errors.As(err, &bad) {
			log.InfoContext(ctx, "denied pod", "reason", bad.msg)
			return denied(req.UID, bad.httpCode(), bad.msg)
		}
		log.ErrorContext(ctx, "cannot compute the sidecar patch", "error", err)
		return denied(req.UID, 500, fmt.Sprintf("gcsfuse webhook: %v", err))
	}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Warnings: d.warnings}
	if len(d.nodeServed) > 0 {
		log.InfoContext(ctx, "no gcsfuse sidecar: the node's shared mounter serves every volume of the driver in the pod", "volumes", strings.Join(d.nodeServed, ", "))
	}
	ops := d.ops
	if len(ops) == 0 {
		return resp
	}
	if !hasObjectMember(req.Object.Raw, "metadata") {
		ops = withMetadata(ops)
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		log.ErrorContext(ctx, "cannot encode the sidecar patch", "error", err)
		return denied(req.UID, 500, fmt.Sprintf("gcsfuse webhook: encoding the patch: %v", err))
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	log.InfoContext(ctx, "injected the gcsfuse sidecar", "mode", d.mode)
	return resp
}

func isPodCreate(req *admissionv1.AdmissionRequest) bool {
	return req.Operation == admissionv1.Create && req.Kind.Group == "" && req.Kind.Kind == "Pod" && req.SubResource == ""
}

// decision is what inject decides for a pod.
type decision struct {
	// ops is the patch, nil when there is nothing to do.
	ops []patchOp
	// warnings are for the user.
	warnings []string
	// mode is the sidecar's mode (contract.ModeNative or contract.ModeLegacy), "" when
	// inject neither adds a sidecar nor keeps one.
	mode string
	// nodeServed names the pod's volumes of the driver when it gets no sidecar because the
	// node's shared mounter serves them all (mountMode: shared); nil otherwise.
	nodeServed []string
}

// inject decides what to do with pod: the patch (nil when there is nothing to do),
// warnings for the user and the chosen mode. A *badRequestError is the user's mistake.
func (m *Mutator) inject(ctx context.Context, pod *corev1.Pod, namespace string) (decision, error) {
	ann, aliasWarnings, err := withIncumbentAliases(pod.Annotations)
	if err != nil {
		return decision{}, err
	}
	opted, set, err := optedIn(ann)
	if err != nil {
		return decision{}, err
	}
	// The one lookup of the pod's volumes: every decision below reads u.vols, or u.sidecar
	// (those of u.vols the node's shared mounter does not serve: shared.go).
	u := driverUsage(ctx, m.cfg.Claims, m.cfg.DriverName, namespace, pod.Spec.Volumes)
	if err := m.checkSharedIdentity(namespace, pod.Spec.Volumes, u); err != nil {
		return decision{}, err
	}
	var found []string
	switch {
	case set && !opted:
		// Opted out: respected, but a volume of the driver in that pod will not be served,
		// unless the node's shared mounter serves it.
		if u.needsSidecar() {
			found = append(found, fmt.Sprintf("the pod mounts %s volume %s but opts out of the gcsfuse sidecar (%s: \"false\"): without one its mount fails",
				m.cfg.DriverName, u.sidecarNames(), contract.AnnotationInject))
		}
		return decision{warnings: append(append(found, aliasWarnings...), ignoredAnnotationWarnings(ann)...)}, nil
	case opted && !u.uses() && onlyAddOnOptIn(m.cfg.DriverName, pod.Annotations):
		// The GKE add-on's annotation on a pod with none of our volumes: the add-on's pod.
		m.log.InfoContext(ctx, "only the GKE driver's annotation and none of our volumes: left to the GKE add-on", "namespace", namespace)
		return decision{warnings: append(aliasWarnings, ignoredAnnotationWarnings(ann)...)}, nil
	case !set && !u.uses():
		return decision{warnings: append(append(u.notInjectedWarnings(m.cfg.DriverName), aliasWarnings...), ignoredAnnotationWarnings(ann)...)}, nil
	}
	if err := checkInlineVolumes(m.cfg.DriverName, pod.Spec.Volumes); err != nil {
		return decision{}, err
	}
	// The pods that get a sidecar, or the shared mounter's mounts: what identity each
	// volume reads as is theirs to check (an opted-out pod's volumes are not served).
	if err := m.checkCredentialConfigMapUse(pod.Annotations, ann, u); err != nil {
		return decision{}, err
	}
	hostNetworkWarnings, err := m.checkHostNetworkIdentity(pod, ann, u.sidecar)
	if err != nil {
		return decision{}, err
	}
	// Every volume of the driver served by the node's shared mounter: no sidecar, unless
	// the pod already has ours (kept below, as at any re-invocation).
	if u.nodeServed(opted) && !(ann[contract.AnnotationInjected] != "" && hasInjectedSidecar(pod)) {
		var warnings []string
		if !set {
			// A claim that could not be resolved may still be a volume of the sidecar's.
			warnings = u.notInjectedWarnings(m.cfg.DriverName)
		}
		warnings = append(append(warnings, aliasWarnings...), nodeServedWarnings(ann, u.shared)...)
		return decision{warnings: warnings, nodeServed: u.shared}, nil
	}
	if !set {
		// No annotation, but the pod uses the driver: it cannot work without the sidecar.
		m.log.InfoContext(ctx, "pod uses the driver without the annotation: injecting", "namespace", namespace, "volumes", u.volumes())
	}
	if len(pod.Spec.Containers) == 0 {
		// The API server rejects such a pod anyway; saying so here also guarantees that
		// "/spec" exists in the object, which the patch paths below rely on.
		return decision{}, badRequest("the pod has no containers")
	}
	warnings := append(append(u.injectedWarnings(m.cfg.DriverName, pod.Spec.InitContainers), aliasWarnings...), unknownAnnotationWarnings(ann)...)
	warnings = append(warnings, hostNetworkWarnings...)
	opts, err := parseOptions(ann, m.cfg.Resources)
	if err != nil {
		return decision{}, err
	}
	// Re-invocation (reinvocationPolicy: IfNeeded) or a pod copied from an injected one:
	// both our marks are there, so the sidecar is ours and stays where it is.
	if opts.injected != "" && hasInjectedSidecar(pod) {
		ops, err := m.reinvoked(pod, opts, u.sidecar)
		if err != nil {
			return decision{}, err
		}
		return decision{ops: ops, warnings: warnings, mode: opts.injected}, nil
	}

	lent, err := findLentSidecar(pod, !addOnServes(m.cfg.DriverName, pod))
	if err != nil {
		return decision{}, err
	}
	image := m.cfg.SidecarImage
	if lent.found {
		if err := validateImageReference(lent.image); err != nil {
			return decision{}, badRequest("container %s: image %q: %v", lent.name, lent.image, err)
		}
		image = lent.image
	}

	choice := chooseMode(m.versions, pod.Spec.NodeName, opts.forcedMode)
	mode := choice.mode
	warnings = append(warnings, choice.warnings...)

	policy, policyWarnings := namespacePolicy(ctx, m.cfg.Policy, namespace)
	warnings = append(warnings, policyWarnings...)
	resources, err := fitSidecarResources(opts.resources, ann, m.cfg.Resources, policy)
	if err != nil {
		return decision{}, err
	}
	newVolumes, vols := sidecarVolumes(pod, u.sidecar)
	sidecar := buildSidecar(image, mode, specGraceSeconds(pod), resources, vols)
	cred, credWarnings, err := m.credentialConfigMap(ctx, pod, namespace, ann, u.sidecar, lent.found, lent.name)
	if err != nil {
		return decision{}, err
	}
	warnings = append(warnings, credWarnings...)
	if cred != nil {
		if newVolumes, err = cred.apply(pod, newVolumes, &sidecar); err != nil {
			return decision{}, err
		}
	}

	ops := []patchOp{annotationOp(pod.Annotations, contract.AnnotationInjected, mode)}
	// Removals first, at the original indices; the insertion index below is computed on
	// the lists as they are after the removal.
	initAfter, regularAfter := pod.Spec.InitContainers, pod.Spec.Containers
	if lent.initIndex >= 0 {
		ops = append(ops, removeOp(fmt.Sprintf("/spec/initContainers/%d", lent.initIndex)))
		initAfter = without(initAfter, lent.initIndex)
	}
	if lent.regularIndex >= 0 {
		ops = append(ops, removeOp(fmt.Sprintf("/spec/containers/%d", lent.regularIndex)))
		regularAfter = without(regularAfter, lent.regularIndex)
	}
	// The pod's containers with the sidecar, for the quota check.
	initWith, regularWith := initAfter, regularAfter
	if mode == contract.ModeNative {
		at := nativeIndex(initAfter, u.sidecar)
		for _, e := range usersEnv(initAfter[at:], u.sidecar) {
			if e.Value != "" {
				sidecar.Env = append(sidecar.Env, e)
			}
		}
		ops = append(ops, insertOp("/spec/initContainers", len(pod.Spec.InitContainers) == 0, at, sidecar))
		initWith = slices.Insert(slices.Clone(initAfter), at, sidecar)
	} else {
		initWarnings, err := checkLegacyInit(initAfter, u.sidecar, choice, m.versions, pod.Spec.NodeName)
		if err != nil {
			return decision{}, err
		}
		warnings = append(warnings, initWarnings...)
		at := legacyIndex(regularAfter)
		ops = append(ops, insertOp("/spec/containers", len(pod.Spec.Containers) == 0, at, sidecar))
		regularWith = slices.Insert(slices.Clone(regularAfter), at, sidecar)
	}
	without, with := pod.Spec, pod.Spec
	without.InitContainers, without.Containers = initAfter, regularAfter
	with.InitContainers, with.Containers = initWith, regularWith
	if err := checkQuotaRoom(policy.Quotas, without, with); err != nil {
		return decision{}, err
	}
	if !lent.found {
		ops = append(ops, pullSecretOps(pod.Spec.ImagePullSecrets, m.cfg.SidecarPullSecrets)...)
	}
	if len(newVolumes) > 0 {
		if len(pod.Spec.Volumes) == 0 {
			ops = append(ops, addOp("/spec/volumes", newVolumes))
		} else {
			for _, v := range newVolumes {
				ops = append(ops, addOp("/spec/volumes/-", v))
			}
		}
	}
	return decision{ops: ops, warnings: warnings, mode: mode}, nil
}

// pullSecretOps adds the secrets the pod's imagePullSecrets do not name yet.
func pullSecretOps(have []corev1.LocalObjectReference, secrets []string) []patchOp {
	var add []corev1.LocalObjectReference
	for _, s := range secrets {
		if !slices.ContainsFunc(have, func(r corev1.LocalObjectReference) bool { return r.Name == s }) &&
			!slices.ContainsFunc(add, func(r corev1.LocalObjectReference) bool { return r.Name == s }) {
			add = append(add, corev1.LocalObjectReference{Name: s})
		}
	}
	switch {
	case len(add) == 0:
		return nil
	case len(have) == 0:
		return []patchOp{addOp("/spec/imagePullSecrets", add)}
	}
	ops := make([]patchOp, 0, len(add))
	for _, r := range add {
		ops = append(ops, addOp("/spec/imagePullSecrets/-", r))
	}
	return ops
}

// hasObjectMember tells whether the JSON object raw has the member key (case-sensitive, as
// the API server and JSON Pointer read it) with a non-null value.
func hasObjectMember(raw []byte, key string) bool {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return false
	}
	v, ok := members[key]
	return ok && string(v) != "null"
}

// withMetadata rewrites ops for a pod object without "metadata": an add under
// "/metadata/annotations" would not apply (its parent is missing), so the map is added with
// its parent. The API server always sends metadata; this keeps every patch applicable to
// the object it was computed from, whatever the object (FuzzAdmissionReview found it).
func withMetadata(ops []patchOp) []patchOp {
	out := slices.Clone(ops)
	for i, op := range out {
		if op.Op == "add" && op.Path == "/metadata/annotations" {
			out[i] = addOp("/metadata", map[string]any{"annotations": op.Value})
		}
	}
	return out
}

// annotationOp sets one annotation, creating the map when the pod has none.
func annotationOp(annotations map[string]string, key, value string) patchOp {
	if len(annotations) == 0 {
		return addOp("/metadata/annotations", map[string]string{key: value})
	}
	return addOp("/metadata/annotations/"+escapePointer(key), value)
}

// insertOp inserts c at index at of the list at path. An empty list may be absent from the
// JSON, where an indexed add would fail, so it is set whole instead.
func insertOp(path string, wasEmpty bool, at int, c corev1.Container) patchOp {
	if wasEmpty {
		return addOp(path, []corev1.Container{c})
	}
	return addOp(fmt.Sprintf("%s/%d", path, at), c)
}

func without(list []corev1.Container, i int) []corev1.Container {
	out := make([]corev1.Container, 0, len(list)-1)
	out = append(out, list[:i]...)
	return append(out, list[i+1:]...)
}

// reinvoked handles a pod that already has our sidecar. A later webhook may have added init
// containers since the sidecar was placed (that is why it re-invokes us), so what depends
// on them is checked again: a native sidecar's contract.EnvInitContainers and
// contract.EnvSidecarUsers are brought up to date, and a legacy pod that now has an init
// container reading the bucket is refused like at the first call. Nothing else is touched;
// an unchanged pod gets no patch.
func (m *Mutator) reinvoked(pod *corev1.Pod, opts podOptions, ours driverVolumes) ([]patchOp, error) {
	for i, c := range pod.Spec.InitContainers {
		if c.Name == contract.SidecarContainerName {
			return usersEnvOps(i, c, pod.Spec.InitContainers[i+1:], ours), nil
		}
	}
	choice := chooseMode(m.versions, pod.Spec.NodeName, opts.forcedMode)
	if choice.mode != contract.ModeLegacy {
		// A copy of a legacy pod, made where native sidecars were not supported.
		choice = modeChoice{mode: contract.ModeLegacy, legacyReason: fmt.Sprintf(
			"the pod already has a regular %s container (annotation %s: %s)",
			contract.SidecarContainerName, contract.AnnotationInjected, opts.injected)}
	}
	_, err := checkLegacyInit(pod.Spec.InitContainers, ours, choice, m.versions, pod.Spec.NodeName)
	return nil, err
}

// usersEnv are the native sidecar's variables naming the containers after it (after) that
// use the mounts: contract.EnvInitContainers (lifecycle.InitContainerUsers) and
// contract.EnvSidecarUsers (lifecycle.NativeSidecarUsers), in that order, with an empty
// Value when there are none. A reader through a claim of the driver's (bound to one of its
// PersistentVolumes, or of a class it provisions) counts like one of an inline volume.
func usersEnv(after []corev1.Container, ours driverVolumes) []corev1.EnvVar {
	mounts := func(c corev1.Container) bool { return mountsAny(c, ours) }
	return []corev1.EnvVar{
		{Name: contract.EnvInitContainers, Value: strings.Join(lifecycle.InitContainerUsers(after, mounts), ",")},
		{Name: contract.EnvSidecarUsers, Value: strings.Join(lifecycle.NativeSidecarUsers(after, mounts), ",")},
	}
}

// usersEnvOps brings usersEnv of the native sidecar at index i of the init containers up to
// date: a variable that differs is replaced, one that is no longer needed removed, a
// missing one added. The operations are computed one after the other on a copy of the
// env, so that the index of a later one accounts for an earlier removal, as when the API
// server applies them in order. The sidecar's env is never emptied (hasInjectedSidecar
// found our contract.EnvSidecarMode in it).
func usersEnvOps(i int, sidecar corev1.Container, after []corev1.Container, ours driverVolumes) []patchOp {
	env := slices.Clone(sidecar.Env)
	path := fmt.Sprintf("/spec/initContainers/%d/env", i)
	var ops []patchOp
	for _, want := range usersEnv(after, ours) {
		j := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == want.Name })
		switch {
		case j < 0 && want.Value == "":
		case j < 0:
			ops = append(ops, addOp(path+"/-", want))
			env = append(env, want)
		case want.Value == "":
			ops = append(ops, removeOp(fmt.Sprintf("%s/%d", path, j)))
			env = slices.Delete(env, j, j+1)
		case env[j].Value != want.Value || env[j].ValueFrom != nil:
			ops = append(ops, replaceOp(fmt.Sprintf("%s/%d", path, j), want))
			env[j] = want
		}
	}
	return ops
}

// hasInjectedSidecar reports whether the pod has a sidecar carrying our env marker.
func hasInjectedSidecar(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name != contract.SidecarContainerName {
				continue
			}
			for _, e := range c.Env {
				if e.Name == contract.EnvSidecarMode {
					return true
				}
			}
		}
	}
	return false
}

// lentSidecar is a container the user named contract.SidecarContainerName (or the GKE
// driver's incumbentSidecarName) to choose the sidecar image. Only its image is kept: the
// rest of our spec replaces it, at our position.
type lentSidecar struct {
	found        bool
	name         string
	image        string
	initIndex    int // -1 when not among the init containers
	regularIndex int // -1 when not among the containers
}

// findLentSidecar finds the container that lends the sidecar's image; one named
// incumbentSidecarName counts only with lendIncumbent (else it is the GKE add-on's own).
func findLentSidecar(pod *corev1.Pod, lendIncumbent bool) (lentSidecar, error) {
	l := lentSidecar{initIndex: -1, regularIndex: -1}
	count := map[string]int{}
	for i, c := range pod.Spec.InitContainers {
		if isLentName(c.Name, lendIncumbent) {
			l.found, l.name, l.image, l.initIndex = true, c.Name, c.Image, i
			count[c.Name]++
		}
	}
	for i, c := range pod.Spec.Containers {
		if isLentName(c.Name, lendIncumbent) {
			l.found, l.name, l.image, l.regularIndex = true, c.Name, c.Image, i
			count[c.Name]++
		}
	}
	if count[contract.SidecarContainerName] > 0 && count[incumbentSidecarName] > 0 {
		return lentSidecar{}, badRequest("the pod has containers named both %s and %s (the GKE driver's name): each lends the sidecar's image, so it is unclear which to use; keep one",
			contract.SidecarContainerName, incumbentSidecarName)
	}
	for name, n := range count {
		if n > 1 {
			return lentSidecar{}, badRequest("the pod has %d containers named %s; container names must be unique", n, name)
		}
	}
	return l, nil
}

// isLentName reports whether a container of the pod's own with this name lends the
// sidecar's image (findLentSidecar) and so is a placeholder, not a workload container. One
// named incumbentSidecarName does only with lendIncumbent (else it is the GKE add-on's own).
func isLentName(name string, lendIncumbent bool) bool {
	return name == contract.SidecarContainerName || (lendIncumbent && name == incumbentSidecarName)
}

func mountsAny(c corev1.Container, ours driverVolumes) bool {
	for _, m := range c.VolumeMounts {
		if ours.has(m.Name) {
			return true
		}
	}
	return false
}

// nativeIndex is where the native sidecar goes among the init containers: at the front, or
// right after a native istio-proxy (gcsfuse needs its network) when that proxy comes before
// the first init container mounting one of our volumes. That container needs the sidecar
// already running, so the sidecar never goes after it; if istio-proxy only starts later,
// the sidecar stays at the front and does without the mesh.
func nativeIndex(init []corev1.Container, ours driverVolumes) int {
	firstUser := len(init)
	for i, c := range init {
		if mountsAny(c, ours) {
			firstUser = i
			break
		}
	}
	for i, c := range init {
		if c.Name == istioProxyName && i < firstUser {
			return i + 1
		}
	}
	return 0
}

// legacyIndex is where the legacy sidecar goes among the containers: first, so that the
// kubelet starts it before the workload, or right after istio-proxy.
func legacyIndex(containers []corev1.Container) int {
	for i, c := range containers {
		if c.Name == istioProxyName {
			return i + 1
		}
	}
	return 0
}

// checkLegacyInit refuses a legacy pod whose regular (run-to-completion) init containers
// mount one of our volumes. The legacy sidecar is a regular container, which the kubelet
// starts only after every init container has completed, so such an init container waits
// for a gcsfuse that never comes and the pod stays Pending forever. The webhook cannot make
// that pod work (it does not override the user's or the cluster's choice of mode), so the
// denial says why the sidecar is legacy and what the user can change.
//
// Init containers with restartPolicy: Always (the user's own native sidecars) do not hold
// back the next ones once started, so they only get a warning: their reads of the bucket
// wait until the legacy sidecar starts.
//
// ours are the volumes of driverUsage: inline CSI volumes of our driver, claims bound or
// pre-bound (claimRef) to its PersistentVolumes, and claims and generic ephemeral volumes
// of a StorageClass it provisions. A claim not bound yet without such a volume or class
// (none, or one that provisions nothing) cannot be told apart and is admitted (with a
// warning from usage.injectedWarnings when an init container mounts it).
func checkLegacyInit(init []corev1.Container, ours driverVolumes, choice modeChoice, cv ClusterVersions, nodeName string) ([]string, error) {
	var blocked, warnings []string
	for _, c := range init {
		vols := mountedOf(c, ours)
		if len(vols) == 0 {
			continue
		}
		if isRestartable(c) {
			warnings = append(warnings, fmt.Sprintf(
				"init container %s mounts gcsfuse volume %s, but the sidecar is a regular (legacy) container that starts after the init containers: its reads of the bucket wait until then",
				c.Name, strings.Join(vols, ", ")))
			continue
		}
		blocked = append(blocked, fmt.Sprintf("%s (volume %s)", c.Name, strings.Join(vols, ", ")))
	}
	if len(blocked) == 0 {
		return warnings, nil
	}
	var cause, remedy string
	if choice.forced {
		cause = fmt.Sprintf("the annotation %s: %s makes the sidecar a regular container",
			contract.AnnotationSidecarMode, contract.ModeLegacy)
		remedy = fmt.Sprintf("Remove the annotation %s (or set it to %s): a native sidecar starts before the init containers and serves them.",
			contract.AnnotationSidecarMode, contract.ModeNative)
		if ok, reason, err := nativeSupported(cv, nodeName); err == nil && !ok {
			remedy += fmt.Sprintf(" But %s, and native sidecars need Kubernetes %s or newer: until then, move the bucket access out of the init containers into a regular container.",
				reason, nativeSidecarMinVersion)
		}
	} else {
		cause = "the sidecar has to be a regular (legacy) container because " + choice.legacyReason
		remedy = fmt.Sprintf("Move the bucket access out of the init containers into a regular container, "+
			"or run the pod on nodes at Kubernetes %[1]s or newer (the API server too), where the sidecar is native and serves init containers: "+
			"the webhook picks native by itself when every node, or the pod's spec.nodeName, is at %[1]s or newer; "+
			"the annotation %[2]s: %[3]s forces it when a nodeSelector or affinity guarantees such a node.",
			nativeSidecarMinVersion, contract.AnnotationSidecarMode, contract.ModeNative)
		if choice.versionsUnknown {
			remedy += " Creating the pod again may also work once the webhook can read the versions."
		}
	}
	what := "init container"
	if len(blocked) > 1 {
		what += "s"
	}
	return nil, badRequest("the gcsfuse sidecar cannot serve %s %s: %s, and a regular container starts only after every init container has completed, so the pod would stay Pending forever. %s",
		what, strings.Join(blocked, ", "), cause, remedy)
}

// mountedOf returns the names of the volumes in names that c mounts, once each, in the
// order of c's mounts.
func mountedOf(c corev1.Container, ours driverVolumes) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if ours.has(m.Name) && !seen[m.Name] {
			seen[m.Name] = true
			out = append(out, m.Name)
		}
	}
	return out
}

// isRestartable reports whether an init container is a native sidecar (restartPolicy:
// Always), which keeps running alongside the next containers instead of completing.
func isRestartable(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// wantsFileCache reports whether any volume of our driver, inline, a claim's
// PersistentVolume or a StorageClass's, asks for a file cache: in its attributes, its
// mountOptions attribute or its spec.mountOptions (folded into the attributes' mountOptions
// when the claim was resolved, withMountOptions).
func wantsFileCache(ours driverVolumes) bool {
	for _, attrs := range ours {
		if mountopts.WantsFileCache(attrs, nil) {
			return true
		}
	}
	return false
}

// checkHostNetworkIdentity refuses a hostNetwork pod with an inline sidecar volume that sets
// the GKE driver's hostNetworkPodKSA "true" and would read with Application Default
// Credentials: no provider on the volume, no key Secret, and a node plugin that federates
// none (NodeFederated, the webhook's --node-federated, which the chart sets with
// node.wifProvider). The volume asks that the pod read as its own Kubernetes service
// account, which this driver does through Workload Identity Federation; with Application
// Default Credentials instead a hostNetwork pod's gcsfuse reaches the metadata server as the
// node, and would read as the node's identity: a change of identity that the manifest does
// not show, so it is refused, saying what to set. Such a volume through a claim is warned
// of: its PersistentVolume's Secret is not known here, and the node plugin cannot tell a
// hostNetwork pod. The pods that are not hostNetwork read as themselves on GKE either way,
// and a shared volume is read by the node's mounter, which is not hostNetwork
// (checkSharedIdentity).
func (m *Mutator) checkHostNetworkIdentity(pod *corev1.Pod, ann map[string]string, ours driverVolumes) ([]string, error) {
	if _, named := ann[contract.AnnotationCredentialConfigMap]; !pod.Spec.HostNetwork || m.cfg.NodeFederated || named {
		// With a credential ConfigMap the volumes without an identity read with it, as the
		// pod's own account, whatever the network.
		return nil, nil
	}
	var warnings []string
	for _, name := range slices.Sorted(maps.Keys(ours)) {
		attrs := ours[name]
		if v, _ := strconv.ParseBool(attrs["hostNetworkPodKSA"]); !v {
			continue
		}
		// A bad identity attribute is the node plugin's to refuse, with its message.
		c, isInline, err := volumeIdentity(pod, name, attrs)
		if err != nil || c.Kind != credentials.KindADC {
			continue
		}
		msg := fmt.Sprintf("volume %s: hostNetworkPodKSA \"true\" asks that this hostNetwork pod read as its own Kubernetes service account, which this driver does only with Workload Identity Federation, and neither the volume nor the node plugin names a provider: with Application Default Credentials a hostNetwork pod's gcsfuse reads as the node; set %s (or identityProvider) on the volume, or the chart's node.wifProvider for every volume (which sets this webhook's --node-federated), or leave hostNetworkPodKSA out to read as the node knowingly", name, contract.AttrWorkloadIdentityProvider)
		if !isInline {
			warnings = append(warnings, msg+" (through a claim: admitted, as its PersistentVolume may bring a Secret)")
			continue
		}
		return nil, forbidden(msg)
	}
	return warnings, nil
}

// sidecarMounts names the pod volumes the sidecar mounts as its buffer and cache ("" for no
// cache).
type sidecarMounts struct{ buffer, cache string }

// sidecarVolumes returns the emptyDirs to add and the volumes the sidecar mounts. A pod may
// bring its own buffer or cache volume (a bigger disk, a RAM disk) under our name or the GKE
// driver's (incumbentBufferVolume, incumbentCacheVolume; ours wins where both are there);
// the cache is mounted only when a volume of the pod asks for a file cache or the pod
// brings one.
func sidecarVolumes(pod *corev1.Pod, ours driverVolumes) ([]corev1.Volume, sidecarMounts) {
	have := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		have[v.Name] = true
	}
	var add []corev1.Volume
	if !have[contract.TmpVolumeName] {
		add = append(add, emptyDir(contract.TmpVolumeName))
	}
	m := sidecarMounts{buffer: contract.BufferVolumeName}
	switch {
	case have[contract.BufferVolumeName]:
	case have[incumbentBufferVolume]:
		m.buffer = incumbentBufferVolume
	default:
		add = append(add, emptyDir(contract.BufferVolumeName))
	}
	switch {
	case have[contract.CacheVolumeName]:
		m.cache = contract.CacheVolumeName
	case have[incumbentCacheVolume]:
		m.cache = incumbentCacheVolume
	case wantsFileCache(ours):
		m.cache = contract.CacheVolumeName
		add = append(add, emptyDir(contract.CacheVolumeName))
	}
	return add, m
}

func emptyDir(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// specGraceSeconds is the pod spec's terminationGracePeriodSeconds, else Kubernetes' default:
// the grace the injected sidecar is given (contract.EnvGraceSeconds) and uses when no
// terminating file from the node plugin names the deletion's. Not
// lifecycle.AppliedGraceSeconds, the grace the kubelet applies to a deletion, which only
// exists once the pod is deleted.
func specGraceSeconds(pod *corev1.Pod) int64 {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return contract.DefaultGraceSeconds
}

// buildSidecar is the full spec of the injected container. Its security context satisfies
// the "restricted" Pod Security Standard so that opting in never makes a pod inadmissible
// in a restricted namespace.
func buildSidecar(image, mode string, grace int64, res corev1.ResourceRequirements, vols sidecarMounts) corev1.Container {
	mounts := []corev1.VolumeMount{
		{Name: contract.TmpVolumeName, MountPath: contract.TmpMountPath},
		{Name: vols.buffer, MountPath: contract.BufferMountPath},
	}
	if vols.cache != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: vols.cache, MountPath: contract.CacheMountPath})
	}
	uid, gid := int64(contract.SidecarUID), int64(contract.SidecarGID)
	yes, no := true, false
	c := corev1.Container{
		Name:  contract.SidecarContainerName,
		Image: image,
		Env: []corev1.EnvVar{
			{Name: contract.EnvGraceSeconds, Value: strconv.FormatInt(grace, 10)},
			{Name: contract.EnvSidecarMode, Value: mode},
			{Name: contract.EnvPodNamespace, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: contract.EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		},
		Resources:                res,
		VolumeMounts:             mounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             &yes,
			RunAsUser:                &uid,
			RunAsGroup:               &gid,
			AllowPrivilegeEscalation: &no,
			ReadOnlyRootFilesystem:   &yes,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	if mode == contract.ModeNative {
		always := corev1.ContainerRestartPolicyAlways
		c.RestartPolicy = &always
	} else {
		// The kubelet runs every container's preStop side by side and sends SIGTERM only
		// after each hook returned: without a hook of its own, a legacy sidecar would be
		// stopped while an app's preStop hook may still write through the mount. This one
		// waits for the exit file (at most the pod's grace). A native sidecar needs none:
		// the kubelet stops it only after the regular containers have exited.
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{contract.SidecarBinary, contract.PreStopWaitFlag}},
		}}
	}
	return c
}
