package audit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/webhook"
)

// auditSidecarImage is the sidecar image the audit's webhook is configured with. It never
// shows: a pod's own sidecar image (one it lends) is reported, the configured one is the
// operator's choice.
const auditSidecarImage = "gcsfuse-csi.invalid/sidecar:audit"

// gkeSidecarImage is the repository of the GKE driver's sidecar image. A pod that lends it
// (its gke-gcsfuse-sidecar container, written for manual injection, or injected by the GKE
// add-on into a pod read back from a cluster) gets a sidecar that cannot run as this
// driver's: the image must be this driver's sidecar image (docs/migration.md).
const gkeSidecarImage = "gcs-fuse-csi-driver-sidecar-mounter"

// nativeVersions answers the webhook that the API server and every kubelet run Kubernetes
// 1.29 (native sidecars on by default): the audit judges pods as a current cluster admits
// them. On an older cluster the sidecar is a regular container, and a pod whose init
// containers read a bucket is denied (with the reason) where the audit admits it.
type nativeVersions struct{}

var assumedVersion = version.MajorMinor(1, 29)

func (nativeVersions) ServerVersion() (*version.Version, error) { return assumedVersion, nil }
func (nativeVersions) MinKubeletVersion(*corev1.Pod) (*version.Version, string, error) {
	return assumedVersion, "every node", nil
}

// Options are the installed driver's settings that change a verdict: those of its webhook
// that a default chart does not have.
type Options struct {
	// SharedADC and SharedFederated are the webhook's --shared-adc-namespaces and
	// --shared-federated (the chart's mounter.adcNamespaces, and node.wifProvider or
	// mounter.identityProvider set): without them a shared volume with no identity of its
	// own is refused, as the default chart refuses it.
	SharedADC       credentials.SharedADC
	SharedFederated bool
	// NodeFederated is the webhook's --node-federated (the chart's node.wifProvider set):
	// every volume without an identity of its own is federated, so a hostNetwork pod's
	// hostNetworkPodKSA is honoured, and a credential ConfigMap would not be.
	NodeFederated bool
}

// auditor holds one audit's state: the inventory and a webhook per driver name.
type auditor struct {
	opts     Options
	inv      *Inventory
	mutators map[string]*webhook.Mutator
	findings []Finding
	cur      entry
	// incumbent counts the volumes of the GKE driver's name judged.
	incumbent int
	log       *slog.Logger
}

// Run audits every object of inv. An error is the audit's own failure (the webhook could
// not be set up), never a verdict.
func Run(ctx context.Context, inv *Inventory, opts Options) (Report, error) {
	a := &auditor{opts: opts, inv: inv, mutators: map[string]*webhook.Mutator{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, e := range inv.entries {
		a.cur = e
		var err error
		switch o := e.obj.(type) {
		case nil:
			a.add("", Note, "", fmt.Sprintf("skipped: the audit reads no %s", e.ref.Kind))
		case *corev1.Pod:
			err = a.pod(ctx, o.ObjectMeta, o.Spec)
		case *appsv1.Deployment:
			err = a.pod(ctx, o.Spec.Template.ObjectMeta, o.Spec.Template.Spec)
		case *appsv1.StatefulSet:
			err = a.statefulSet(ctx, o)
		case *appsv1.DaemonSet:
			err = a.pod(ctx, o.Spec.Template.ObjectMeta, o.Spec.Template.Spec)
		case *appsv1.ReplicaSet:
			err = a.pod(ctx, o.Spec.Template.ObjectMeta, o.Spec.Template.Spec)
		case *batchv1.Job:
			err = a.pod(ctx, o.Spec.Template.ObjectMeta, o.Spec.Template.Spec)
		case *batchv1.CronJob:
			err = a.pod(ctx, o.Spec.JobTemplate.Spec.Template.ObjectMeta, o.Spec.JobTemplate.Spec.Template.Spec)
		case *corev1.PersistentVolume:
			a.persistentVolume(o)
		case *corev1.PersistentVolumeClaim:
			a.claim(o)
		case *storagev1.StorageClass:
			a.storageClass(o)
		case *corev1.ConfigMap:
			// Read by the pods that name it as their credentials; nothing of its own to judge.
		}
		if err != nil {
			return Report{}, fmt.Errorf("%s (%s): %w", e.ref, e.source, err)
		}
	}
	return Report{Findings: a.findings, IncumbentVolumes: a.incumbent}, nil
}

// add records a finding on the current object.
func (a *auditor) add(scope string, v Verdict, stage Stage, detail string) {
	a.findings = append(a.findings, Finding{Object: a.cur.ref, Scope: scope, Verdict: v, Stage: stage, Detail: detail, Source: a.cur.source})
}

// namespace is the current object's namespace.
func (a *auditor) namespace() string { return a.cur.ref.Namespace }

// mutator is the webhook installed under driver, with the inventory's claims.
func (a *auditor) mutator(driver string) (*webhook.Mutator, error) {
	if m := a.mutators[driver]; m != nil {
		return m, nil
	}
	m, err := webhook.NewMutator(webhook.Config{SidecarImage: auditSidecarImage, DriverName: driver, Claims: a.inv, ConfigMaps: a.inv,
		SharedADC: a.opts.SharedADC, SharedFederated: a.opts.SharedFederated, NodeFederated: a.opts.NodeFederated}, nativeVersions{}, a.log)
	if err != nil {
		return nil, err
	}
	a.mutators[driver] = m
	return m, nil
}

// isGCSFuseProvisioner reports whether a StorageClass's provisioner is one of this
// driver's names (the GKE driver's included).
func isGCSFuseProvisioner(sc *storagev1.StorageClass) bool { return isDriver(sc.Provisioner) }

// persistentVolume judges a PersistentVolume of the driver; others are not ours to judge.
func (a *auditor) persistentVolume(pv *corev1.PersistentVolume) {
	if pv.Spec.CSI == nil || !isDriver(pv.Spec.CSI.Driver) {
		return
	}
	a.countDriver(pv.Spec.CSI.Driver)
	v := judgeVolume(persistentVolume(pv))
	a.add("", v.verdict, v.stage, v.detail)
	a.profileClass(pv)
}

// countDriver counts a judged volume of the GKE driver's name.
func (a *auditor) countDriver(driver string) {
	if driver == contract.IncumbentDriverName {
		a.incumbent++
	}
}

// gkeProfileClassPrefix starts the names of the StorageClasses GKE installs for its
// driver's profiles (gcsfusecsi-training, gcsfusecsi-serving, gcsfusecsi-checkpointing).
const gkeProfileClassPrefix = "gcsfusecsi-"

// annotationProvisionedBy names, on a PersistentVolume, the provisioner that made it.
const annotationProvisionedBy = "pv.kubernetes.io/provisioned-by"

// profileClass warns about a PersistentVolume whose StorageClass the GKE driver reads for
// options (its profiles: the class's mountOptions and parameters apply to the volume):
// this driver applies a class's parameters only to the volumes it provisions (they are in
// the volume then), so a static volume runs with its own options only.
func (a *auditor) profileClass(pv *corev1.PersistentVolume) {
	name := pv.Spec.StorageClassName
	class := a.inv.classes[name]
	switch {
	case isDriver(pv.Annotations[annotationProvisionedBy]):
		return // provisioned: the class's parameters are its attributes
	case class != nil && isGCSFuseProvisioner(class) && (len(class.Parameters) > 0 || len(class.MountOptions) > 0):
	case class == nil && strings.HasPrefix(name, gkeProfileClassPrefix):
	default:
		return
	}
	a.add("", Warning, "", fmt.Sprintf(
		"storageClassName %s: the GKE driver applies that class's mountOptions and parameters (its profile) to this volume; this driver applies a class's parameters only to the volumes it provisions, so this one runs with its own options only: copy what it needs into the PersistentVolume",
		name))
}

// claim judges a claim on what binds it: a claim that no PersistentVolume in the input
// binds, of a class of the driver's, is provisioned by the driver, unless its class or the
// claim itself is refused (pendingClaim). One that a volume binds, by the claim's
// volumeName or the volume's claimRef alone, says nothing: the volume is judged on its
// own, and the webhook resolves either (a claim, its volume and the pod applied at once
// included: it finds the volume whose claimRef names the claim before the PV controller
// binds them).
func (a *auditor) claim(c *corev1.PersistentVolumeClaim) {
	pv := a.inv.boundVolume(c.Namespace, c.Name)
	switch {
	case pv != nil:
	case c.Spec.VolumeName != "":
		a.add("", Note, "", fmt.Sprintf("PersistentVolume %s is not in the input: not audited", c.Spec.VolumeName))
	default:
		class := a.inv.class(c.Spec.StorageClassName)
		if class == nil || !isGCSFuseProvisioner(class) {
			return
		}
		a.countDriver(class.Provisioner)
		v := pendingClaim{class: class, spec: c.Spec, volumeName: claimVolumeName(c)}.judge("no PersistentVolume binds it")
		a.add("", v.verdict, v.stage, v.detail)
	}
}

// statefulSet judges a StatefulSet's pod template with its volumeClaimTemplates of a class
// of the driver's: the StatefulSet controller gives each replica a claim of each template,
// as the pod's volume of the template's name (replacing a volume of that name), not bound
// when the pod is admitted. The webhook resolves such a claim through its class, as it
// resolves a generic ephemeral volume's, so the template is one to the webhook and a
// pendingClaim to the audit. A template with a volumeName binds that one volume, judged on
// its own.
func (a *auditor) statefulSet(ctx context.Context, s *appsv1.StatefulSet) error {
	spec := *s.Spec.Template.Spec.DeepCopy()
	templates := map[string]bool{}
	for _, c := range s.Spec.VolumeClaimTemplates {
		class := a.inv.class(c.Spec.StorageClassName)
		if class == nil || !isGCSFuseProvisioner(class) || c.Spec.VolumeName != "" {
			continue
		}
		spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.Name })
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
			Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: c.Spec}}}})
		templates[c.Name] = true
	}
	return a.podWith(ctx, s.Spec.Template.ObjectMeta, spec, templates)
}

// hasOurAnnotations reports whether a pod carries an annotation of either driver.
func hasOurAnnotations(ann map[string]string) bool {
	for k := range ann {
		if strings.HasPrefix(k, contract.AnnotationPrefix) || strings.HasPrefix(k, "gke-gcsfuse/") {
			return true
		}
	}
	return false
}

// hasLendingContainer reports whether a pod has a container named like either sidecar.
func hasLendingContainer(spec corev1.PodSpec) bool {
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if c.Name == contract.SidecarContainerName || c.Name == contract.IncumbentSidecarContainerName {
			return true
		}
	}
	return false
}

// podVolume is one of a pod's volumes of the driver.
type podVolume struct {
	name string
	spec volumeSpec
	// claim is the claim it comes through ("" for an inline volume, a generic ephemeral
	// volume or a volumeClaimTemplate).
	claim string
	// pending is set for a volume not bound yet, of a class of the driver's (a claim of the
	// input, a generic ephemeral volume, a volumeClaimTemplate), judged by what its class
	// provisions; what names it in the finding.
	pending *pendingClaim
	what    string
}

// pod judges a pod, or a workload's pod template: what admission does with it (the
// webhook's decision), then each of its volumes of the driver (NodePublishVolume's, or the
// provisioner's and NodePublishVolume's for one not bound yet).
func (a *auditor) pod(ctx context.Context, meta metav1.ObjectMeta, spec corev1.PodSpec) error {
	return a.podWith(ctx, meta, spec, nil)
}

// podWith is pod, with templates naming the ephemeral volumes that stand for a
// StatefulSet's volumeClaimTemplates.
func (a *auditor) podWith(ctx context.Context, meta metav1.ObjectMeta, spec corev1.PodSpec, templates map[string]bool) error {
	ns := a.namespace()
	var vols []podVolume
	drivers := map[string]bool{}
	var unresolved []string
	for _, v := range spec.Volumes {
		switch {
		case v.CSI != nil && isDriver(v.CSI.Driver):
			vols = append(vols, podVolume{name: v.Name, spec: inlineVolume(v)})
			drivers[v.CSI.Driver] = true
		case v.PersistentVolumeClaim != nil:
			claim := v.PersistentVolumeClaim.ClaimName
			pv := a.inv.boundVolume(ns, claim)
			c := a.inv.claim(ns, claim)
			switch {
			case pv != nil && pv.Spec.CSI != nil && isDriver(pv.Spec.CSI.Driver):
				vols = append(vols, podVolume{name: v.Name, spec: persistentVolume(pv), claim: claim})
				drivers[pv.Spec.CSI.Driver] = true
			case pv == nil && c == nil:
				unresolved = append(unresolved, fmt.Sprintf("volume %s: claim %s is not in the input: if it is bound to a PersistentVolume of this driver, audit that volume too", v.Name, claim))
			case pv == nil && c.Spec.VolumeName == "":
				if class := a.inv.class(c.Spec.StorageClassName); class != nil && isGCSFuseProvisioner(class) {
					vols = append(vols, podVolume{name: v.Name, claim: claim, what: "claim " + claim,
						pending: &pendingClaim{class: class, spec: c.Spec, volumeName: claimVolumeName(c)}})
					drivers[class.Provisioner] = true
				}
			}
		case v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
			// Its claim (<pod>-<volume>) is made after the pod, with the default class when
			// the template names none.
			tmpl := v.Ephemeral.VolumeClaimTemplate
			if class := a.inv.class(tmpl.Spec.StorageClassName); class != nil && isGCSFuseProvisioner(class) {
				what := "ephemeral claim"
				if templates[v.Name] {
					what = "volumeClaimTemplate " + v.Name + " (a claim per replica)"
				}
				vols = append(vols, podVolume{name: v.Name, what: what, pending: &pendingClaim{class: class, spec: tmpl.Spec}})
				drivers[class.Provisioner] = true
			}
		}
	}
	if len(vols) == 0 && !hasOurAnnotations(meta.Annotations) && !hasLendingContainer(spec) {
		return nil // nothing of the driver's
	}
	driver := contract.DriverName
	switch {
	case len(drivers) > 1:
		a.add("pod", Refused, StageMount, fmt.Sprintf(
			"the pod mounts volumes of both %s and %s, but the driver is installed under one name at a time: the kubelet finds no driver for the others",
			contract.DriverName, contract.IncumbentDriverName))
		driver = contract.IncumbentDriverName
	case drivers[contract.IncumbentDriverName]:
		driver = contract.IncumbentDriverName
	}
	// The volumes' verdicts first: an inline volume that the webhook refuses is said on the
	// volume's line, and the pod's admission line does not repeat it.
	judged := make([]verdict, len(vols))
	said := map[string]bool{}
	for i, v := range vols {
		if v.pending != nil {
			judged[i] = v.pending.judge(v.what)
			continue
		}
		judged[i] = judgeVolume(v.spec)
		if judged[i].verdict == Refused && judged[i].stage == StageAdmission {
			said[judged[i].detail] = true
		}
	}
	if err := a.admission(ctx, driver, meta, spec, len(vols) > 0, said); err != nil {
		return err
	}
	for _, u := range unresolved {
		a.add("pod", Note, "", u)
	}
	for i, v := range vols {
		switch {
		case v.pending != nil && v.claim == "":
			a.countDriver(v.pending.class.Provisioner)
		case v.claim == "":
			a.countDriver(v.spec.driver) // a PersistentVolume or a claim is counted once, on its own
		}
		j := judged[i]
		detail := j.detail
		if v.claim != "" && v.pending == nil {
			detail = fmt.Sprintf("claim %s -> PersistentVolume %s; %s", v.claim, v.spec.name, detail)
		}
		a.add("volume "+v.name, j.verdict, j.stage, detail)
	}
	return nil
}
