package audit

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// A claim that no PersistentVolume binds, of a StorageClass whose provisioner is one of the
// driver's names, is provisioned by the driver's controller (installed under that name): a
// directory of its own in the class's bucket. Such a claim is a PersistentVolumeClaim of the
// input, a StatefulSet's volumeClaimTemplate (a claim per replica) or a pod's generic
// ephemeral volume (a claim per pod), and each is judged the same way: by the provisioner's
// own check of the claim and its class (classparams.CheckClaim, which Provision runs before
// it touches the bucket), then by NodePublishVolume's checks (judgeVolume) on the
// PersistentVolume it would make. What neither can tell, whether the bucket exists and the
// provisioner's identity may write to it, the audit cannot tell either.

// pendingClaim is a claim of a class of the driver that no PersistentVolume binds.
type pendingClaim struct {
	class *storagev1.StorageClass
	spec  corev1.PersistentVolumeClaimSpec
	// volumeName is the name its PersistentVolume gets (pvc-<claim uid>), "" when the claim
	// has no uid (a manifest's, a template's).
	volumeName string
}

// claimVolumeName is the name the provisioner gives a claim's PersistentVolume, "" for a
// claim without a uid (one read from a manifest).
func claimVolumeName(c *corev1.PersistentVolumeClaim) string {
	if c.UID == "" {
		return ""
	}
	return "pvc-" + string(c.UID)
}

// provisioned is what the provisioner and then the node plugin make of the claim: Refused
// at provisioning with CheckClaim's reason, Refused at mount with the node plugin's, or the
// judged volume's verdict with, as detail, its directory and reclaim policy and what was
// mapped ("gs://bkt/prefix/<volume>/ (reclaim policy Delete: ...)").
func (c pendingClaim) provisioned() verdict {
	name := c.volumeName
	if name == "" {
		name = classparams.ExampleVolumeName
	}
	pc, err := classparams.CheckClaim(c.class, c.spec, name)
	if err != nil {
		return verdict{verdict: Refused, stage: StageProvisioning, detail: err.Error()}
	}
	j := judgeVolume(volumeSpec{name: name, driver: c.class.Provisioner, attrs: pc.Attributes, mountFlags: c.class.MountOptions,
		handle: pc.VolumeHandle})
	if j.verdict == Refused {
		return j
	}
	dir := pc.Dir
	if c.volumeName == "" {
		dir = path.Join(pc.Class.PathPrefix, "<volume>")
	}
	parts := []string{fmt.Sprintf("gs://%s/%s/ (reclaim policy %s: %s)", pc.Class.Bucket, dir, pc.ReclaimPolicy, reclaimNote(pc.ReclaimPolicy))}
	parts = append(parts, j.mapped...)
	if j.credentials != "" {
		parts = append(parts, j.credentials)
	}
	return verdict{verdict: j.verdict, detail: strings.Join(parts, "; ")}
}

// reclaimNote says what a reclaim policy does with a claim's directory.
func reclaimNote(p corev1.PersistentVolumeReclaimPolicy) string {
	switch p {
	case corev1.PersistentVolumeReclaimDelete:
		return "its objects are deleted when the claim is"
	case corev1.PersistentVolumeReclaimRetain:
		return "the directory and its objects are kept when the claim is deleted"
	}
	return "not one the provisioner acts on: the directory is kept"
}

// judge is the finding on the claim, what naming it ("no PersistentVolume binds it",
// "claim c", "ephemeral claim"): its class refuses to provision it (it stays Pending), or
// provisions it a volume that is refused at mount, or one that runs.
func (c pendingClaim) judge(what string) verdict {
	v := c.provisioned()
	by := fmt.Sprintf("StorageClass %s (provisioner %s)", c.class.Name, c.class.Provisioner)
	switch {
	case v.verdict == Refused && v.stage == StageProvisioning:
		v.detail = fmt.Sprintf("%s: %s refuses to provision it: %s; it stays Pending", what, by, v.detail)
	case v.verdict == Refused:
		v.detail = fmt.Sprintf("%s: %s provisions it a volume that is refused at mount: %s", what, by, v.detail)
	default:
		v.detail = fmt.Sprintf("%s: %s provisions it a directory of its own, %s", what, by, v.detail)
		if c.class.Provisioner == contract.IncumbentDriverName {
			// What that takes is said once, in the report's summary (Report.Summary).
			v.detail += "; driver " + c.class.Provisioner
		}
	}
	return v
}

// storageClass says what a class of the driver's provisions: what each claim of it gets, or
// why its claims are refused. A class of the GKE driver's name that names no bucket (GKE's
// own profile classes, gcsfusecsi-*, whose parameters the GKE driver applies to the static
// PersistentVolumes that name them) is a warning, not a refusal: PersistentVolumes made for
// it are judged on their own (profileClass), and only a claim the class would provision is
// refused, on its own line.
func (a *auditor) storageClass(sc *storagev1.StorageClass) {
	if !isGCSFuseProvisioner(sc) {
		return
	}
	v := pendingClaim{class: sc}.provisioned()
	head := "provisioner " + sc.Provisioner + ": "
	if sc.Provisioner == contract.IncumbentDriverName {
		head = "provisioner " + sc.Provisioner + ": with this driver installed under that name, "
	}
	switch {
	case v.verdict == Refused && v.stage == StageProvisioning && sc.Provisioner == contract.IncumbentDriverName && sc.Parameters[contract.AttrBucketName] == "":
		a.add("", Warning, "", head+"its controller refuses the claims of this class that no PersistentVolume binds: "+v.detail+
			"; PersistentVolumes made for the class are judged on their own")
	case v.verdict == Refused && v.stage == StageProvisioning:
		a.add("", Refused, StageProvisioning, head+"claims of this class are refused when provisioned: "+v.detail)
	case v.verdict == Refused:
		a.add("", Refused, v.stage, head+"claims of this class are provisioned, and their volumes refused at mount: "+v.detail)
	default:
		a.add("", v.verdict, "", head+"each claim gets its own directory "+v.detail)
	}
}
