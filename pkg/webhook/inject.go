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

	choice := chooseMode(m.versions, pod, opts.forcedMode)
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
		sidecar.Env = append(sidecar.Env, usersEnv(initAfter[at:], u.sidecar)...)
		ops = append(ops, insertOp("/spec/initContainers", len(pod.Spec.InitContainers) == 0, at, sidecar))
		initWith = slices.Insert(slices.Clone(initAfter), at, sidecar)
	} else {
		initWarnings, err := checkLegacyInit(pod, initAfter, u.sidecar, choice, m.versions)
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
