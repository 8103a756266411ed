// Package audit tells, before a migration from the GKE Cloud Storage FUSE CSI driver, what
// this driver would do with each volume of a set of objects (manifests or a cluster's
// pods, workloads, PersistentVolumes and StorageClasses): run it unchanged, run it with an
// attribute, option or annotation mapped to this driver's equivalent (and to what), or
// refuse it (and why, and where: at admission, at mount or when the claim is provisioned).
//
// It predicts nothing by a logic of its own: every verdict comes from the functions that
// admission, the provisioner and NodePublishVolume run. A volume goes through
// mountopts.Explain (which calls mountopts.FromAttributes, as NodePublishVolume does),
// mountopts.CheckAccessType, contract.ValidVolumeName and credentials.Choose (which
// credentials.Build calls first); a claim of a class of the driver that no volume binds yet,
// and the class itself, through classparams.CheckClaim (Provision's check of the claim and
// its class) and then those checks on the PersistentVolume it would make; a pod through
// webhook.Mutator.Review, the webhook's own decision on that pod. So the audit and the
// driver cannot disagree, and a refusal here carries the driver's own words.
package audit

import (
	"fmt"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Verdict is what the driver does with a volume or a pod.
type Verdict string

// The verdicts. Only Refused makes an audit fail.
const (
	// Unchanged: runs as it is (a volume of the GKE driver's name needs the driver
	// installed under that name, which the finding says).
	Unchanged Verdict = "unchanged"
	// Mapped: runs, with some of its inputs read as this driver's equivalent; the finding
	// says what each became.
	Mapped Verdict = "mapped"
	// Refused: admission denies the pod, NodePublishVolume refuses the volume, or the
	// object can never be served; the finding gives the driver's reason.
	Refused Verdict = "refused"
	// Warning: runs, but something in it is ignored or has no equivalent here.
	Warning Verdict = "warning"
	// Note: what the audit could not judge (an object it does not read, a claim whose
	// PersistentVolume is not in the input).
	Note Verdict = "note"
)

// Stage is where a refusal happens, which is where a user sees it.
type Stage string

// The stages of a refusal.
const (
	// StageAdmission: the webhook denies the pod; kubectl (or the workload controller's
	// FailedCreate Event) shows the reason.
	StageAdmission Stage = "admission"
	// StageMount: NodePublishVolume refuses the volume; the pod's FailedMount Event shows
	// the reason and the pod never starts.
	StageMount Stage = "mount"
	// StageProvisioning: the provisioner refuses the claim's volume; the claim stays
	// Pending, and its ProvisioningFailed Event gives the reason.
	StageProvisioning Stage = "provisioning"
	// StageSidecarStart: admitted and mounted, but the sidecar cannot run.
	StageSidecarStart Stage = "sidecar start"
)

// Ref names an object of the input.
type Ref struct {
	Kind, Namespace, Name string
}

// String is "Kind/namespace/name", or "Kind/name" for an object without a namespace
// (cluster-scoped, or a manifest that leaves it to kubectl's current namespace).
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// Finding is one line of the audit.
type Finding struct {
	Object Ref
	// Scope narrows the finding within the object: "volume <name>" for one of a pod's
	// volumes, "pod" for what admission does with the pod, "" for the object itself.
	Scope   string
	Verdict Verdict
	// Stage is where a Refused finding's refusal happens.
	Stage Stage
	// Detail says what was mapped to what, or why it is refused, in the driver's words.
	Detail string
	// Source is where the object was read: "file.yaml:12" (the line its document starts
	// on) or "cluster".
	Source string
}

// String is the finding's line: "<object>[ <scope>]: <verdict>: [at <stage>: ]<detail>".
// One line per finding (a detail's line breaks are flattened), so that the output greps.
func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.Object.String())
	if f.Scope != "" {
		b.WriteString(" " + f.Scope)
	}
	fmt.Fprintf(&b, ": %s: ", f.Verdict)
	if f.Verdict == Refused && f.Stage != "" {
		fmt.Fprintf(&b, "at %s: ", f.Stage)
	}
	b.WriteString(strings.Join(strings.Fields(f.Detail), " "))
	return b.String()
}

// Report is an audit's findings, in the order of the input.
type Report struct {
	Findings []Finding
	// IncumbentVolumes counts the volumes of the GKE driver's name (inline, generic
	// ephemeral, PersistentVolumes, claims and volumeClaimTemplates its classes provision),
	// which run only with this driver installed under that name.
	IncumbentVolumes int
}

// Refused reports whether anything would be refused.
func (r Report) Refused() bool {
	for _, f := range r.Findings {
		if f.Verdict == Refused {
			return true
		}
	}
	return false
}

// Count returns how many findings have verdict v.
func (r Report) Count(v Verdict) int {
	n := 0
	for _, f := range r.Findings {
		if f.Verdict == v {
			n++
		}
	}
	return n
}

// Summary ends the report: what the GKE driver's name takes, when volumes use it, then
// the count of each verdict.
func (r Report) Summary() string {
	var b strings.Builder
	if r.IncumbentVolumes > 0 {
		fmt.Fprintf(&b, "driver %s: %d volumes use the GKE driver's name: install this driver under it (Helm: --set driverName=%s, docs/migration.md) or set their driver to %s\n",
			contract.IncumbentDriverName, r.IncumbentVolumes, contract.IncumbentDriverName, contract.DriverName)
	}
	fmt.Fprintf(&b, "summary: %d unchanged, %d mapped, %d refused, %d warnings, %d notes",
		r.Count(Unchanged), r.Count(Mapped), r.Count(Refused), r.Count(Warning), r.Count(Note))
	return b.String()
}
