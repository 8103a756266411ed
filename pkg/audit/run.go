package audit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
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

func (nativeVersions) ServerVersion() (*version.Version, error)           { return assumedVersion, nil }
func (nativeVersions) MinKubeletVersion(string) (*version.Version, error) { return assumedVersion, nil }

// auditor holds one audit's state: the inventory and a webhook per driver name.
type auditor struct {
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
func Run(ctx context.Context, inv *Inventory) (Report, error) {
	a := &auditor{inv: inv, mutators: map[string]*webhook.Mutator{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
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
	m, err := webhook.NewMutator(webhook.Config{SidecarImage: auditSidecarImage, DriverName: driver, Claims: a.inv}, nativeVersions{}, a.log)
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

// profileClass warns about a PersistentVolume whose StorageClass the GKE driver reads for
// options (its profiles: the class's mountOptions and parameters apply to the volume):
// this driver reads no StorageClass, so the volume runs with its own options only.
func (a *auditor) profileClass(pv *corev1.PersistentVolume) {
	name := pv.Spec.StorageClassName
	class := a.inv.classes[name]
	switch {
	case class != nil && isGCSFuseProvisioner(class) && (len(class.Parameters) > 0 || len(class.MountOptions) > 0):
	case class == nil && strings.HasPrefix(name, gkeProfileClassPrefix):
	default:
		return
	}
	a.add("", Warning, "", fmt.Sprintf(
		"storageClassName %s: the GKE driver applies that class's mountOptions and parameters (its profile) to this volume; this driver reads no StorageClass, so the volume runs with its own options only: copy what it needs into the PersistentVolume",
		name))
}

// claim judges a claim on what binds it: a claim that no PersistentVolume in the input
// binds, of a class of the driver's, waits for a provisioning that never comes.
func (a *auditor) claim(c *corev1.PersistentVolumeClaim) {
	pv, byClaimRef := a.inv.boundVolume(c.Namespace, c.Name)
	switch {
	case pv != nil && byClaimRef && pv.Spec.CSI != nil && isDriver(pv.Spec.CSI.Driver):
		a.add("", Warning, "", fmt.Sprintf(
			"no volumeName: PersistentVolume %s binds it by its claimRef, and a pod created before the binding (the same apply) gets no gcsfuse sidecar, its mount refused; set spec.volumeName: %s",
			pv.Name, pv.Name))
	case pv != nil:
	case c.Spec.VolumeName != "":
		a.add("", Note, "", fmt.Sprintf("PersistentVolume %s is not in the input: not audited", c.Spec.VolumeName))
	default:
		class := a.inv.classes[ptrValue(c.Spec.StorageClassName)]
		if class != nil && isGCSFuseProvisioner(class) {
			a.add("", Refused, StageProvisioning, fmt.Sprintf(
				"no PersistentVolume binds it, and StorageClass %s (provisioner %s) never provisions one: this driver has no dynamic provisioning, so the claim stays Pending; create a PersistentVolume for the bucket and set the claim's volumeName",
				class.Name, class.Provisioner))
		}
	}
}

// storageClass says what a class of the driver's means here: nothing is provisioned.
func (a *auditor) storageClass(sc *storagev1.StorageClass) {
	if !isGCSFuseProvisioner(sc) {
		return
	}
	detail := fmt.Sprintf("provisioner %s: this driver has no dynamic provisioning (no controller); a claim of this class binds only to a PersistentVolume made for it",
		sc.Provisioner)
	var unread []string
	if len(sc.MountOptions) > 0 {
		unread = append(unread, "mountOptions "+strings.Join(sc.MountOptions, ", "))
	}
	if len(sc.Parameters) > 0 {
		unread = append(unread, "parameters "+strings.Join(slices.Sorted(maps.Keys(sc.Parameters)), ", "))
	}
	if len(unread) > 0 {
		detail += fmt.Sprintf("; its %s are not read: put what the volumes need in each PersistentVolume's volumeAttributes or mountOptions",
			strings.Join(unread, " and "))
	}
	a.add("", Warning, "", detail)
}

// statefulSet judges a StatefulSet's template, and its volumeClaimTemplates like claims.
func (a *auditor) statefulSet(ctx context.Context, s *appsv1.StatefulSet) error {
	for _, c := range s.Spec.VolumeClaimTemplates {
		class := a.inv.classes[ptrValue(c.Spec.StorageClassName)]
		if class != nil && isGCSFuseProvisioner(class) && c.Spec.VolumeName == "" {
			a.add("volume "+c.Name, Refused, StageProvisioning, fmt.Sprintf(
				"volumeClaimTemplate %s asks StorageClass %s (provisioner %s) for a volume per replica: this driver has no dynamic provisioning, so the claims stay Pending",
				c.Name, class.Name, class.Provisioner))
		}
	}
	return a.pod(ctx, s.Spec.Template.ObjectMeta, s.Spec.Template.Spec)
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
	// claim is the claim it comes through ("" for an inline volume).
	claim string
}

// pod judges a pod, or a workload's pod template: what admission does with it (the
// webhook's decision), then each of its volumes of the driver (NodePublishVolume's).
func (a *auditor) pod(ctx context.Context, meta metav1.ObjectMeta, spec corev1.PodSpec) error {
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
			pv, _ := a.inv.boundVolume(ns, claim)
			switch {
			case pv != nil && pv.Spec.CSI != nil && isDriver(pv.Spec.CSI.Driver):
				vols = append(vols, podVolume{name: v.Name, spec: persistentVolume(pv), claim: claim})
				drivers[pv.Spec.CSI.Driver] = true
			case pv == nil && a.inv.claim(ns, claim) == nil:
				unresolved = append(unresolved, fmt.Sprintf("volume %s: claim %s is not in the input: if it is bound to a PersistentVolume of this driver, audit that volume too", v.Name, claim))
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
		if v.claim == "" {
			a.countDriver(v.spec.driver) // a PersistentVolume is counted once, on its own
		}
		j := judged[i]
		detail := j.detail
		if v.claim != "" {
			detail = fmt.Sprintf("claim %s -> PersistentVolume %s; %s", v.claim, v.spec.name, detail)
		}
		a.add("volume "+v.name, j.verdict, j.stage, detail)
	}
	return nil
}
