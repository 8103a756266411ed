package audit

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// isDriver reports whether a CSI driver name is one this driver may be installed under.
func isDriver(name string) bool { return slices.Contains(contract.DriverNames, name) }

// volumeSpec is what NodePublishVolume gets for one volume, as far as its definition says.
type volumeSpec struct {
	// name is the volume's directory in the kubelet's target path, which the node plugin
	// checks: the pod's volume name for an inline volume, the PersistentVolume's name for
	// a PersistentVolume.
	name   string
	driver string
	attrs  map[string]string
	// mountFlags are a PersistentVolume's mountOptions.
	mountFlags []string
	// handle is a PersistentVolume's volumeHandle ("" for an inline volume, whose ID the
	// kubelet generates and which is never a bucket).
	handle string
	// inline: a pod's inline CSI volume, which the webhook checks at admission.
	inline bool
	// hasKey: the volume names a nodePublishSecretRef.
	hasKey bool
	block  bool
	fsType string
}

// verdict is one volume's verdict and its detail.
type verdict struct {
	verdict Verdict
	stage   Stage
	detail  string
	// mapped and credentials are parts of an admitted volume's detail: what was mapped to
	// what, and the identity it reads its bucket with ("" for the default).
	mapped      []string
	credentials string
}

// credentialsConfig is the node plugin's credentials configuration the audit checks
// volumes against: the chart's defaults (no --wif-provider, the default STS and no further
// token URLs). A volume that relies on a node plugin flag (serviceAccount or tokenURL
// without a provider of its own) is judged as refused, with the message that names the
// flag.
var credentialsConfig = credentials.Config{}.WithDefaults()

// inlineVolume is the volumeSpec of a pod's inline CSI volume.
func inlineVolume(v corev1.Volume) volumeSpec {
	return volumeSpec{name: v.Name, driver: v.CSI.Driver, attrs: v.CSI.VolumeAttributes, inline: true, hasKey: v.CSI.NodePublishSecretRef != nil,
		fsType: ptrValue(v.CSI.FSType)}
}

// persistentVolume is the volumeSpec of a PersistentVolume of the driver.
func persistentVolume(pv *corev1.PersistentVolume) volumeSpec {
	return volumeSpec{name: pv.Name, driver: pv.Spec.CSI.Driver, attrs: pv.Spec.CSI.VolumeAttributes, mountFlags: pv.Spec.MountOptions,
		handle: pv.Spec.CSI.VolumeHandle, hasKey: pv.Spec.CSI.NodePublishSecretRef != nil,
		block: pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock, fsType: pv.Spec.CSI.FSType}
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// judgeVolume runs a volume through NodePublishVolume's checks, in its order: the access
// type, the volume's name, its attributes and options (mountopts), its identity
// (credentials). A refusal's detail is the node plugin's message. An inline volume's access
// type, attributes and options are the webhook's to refuse (webhook checkInlineVolumes, the
// same checks, the same message): refused at admission.
func judgeVolume(v volumeSpec) verdict {
	optionsStage := StageMount
	if v.inline {
		optionsStage = StageAdmission
	}
	if err := mountopts.CheckAccessType(v.block, v.fsType); err != nil {
		if v.inline {
			return verdict{verdict: Refused, stage: StageAdmission, detail: fmt.Sprintf("volume %s: %v", v.name, err)}
		}
		return verdict{verdict: Refused, stage: StageMount, detail: err.Error()}
	}
	if !contract.ValidVolumeName(v.name) {
		return verdict{verdict: Refused, stage: StageMount, detail: fmt.Sprintf(
			"target_path: volume name %q: want a DNS-1123 label or subdomain (a pod volume's or a PersistentVolume's name) of at most %d characters (the kubelet names the volume's directory after it)", v.name, contract.MaxVolumeNameLen)}
	}
	vol, mappings, err := mountopts.Explain(v.attrs, v.mountFlags, v.handle)
	if err != nil {
		// NodePublishVolume's InvalidArgument (and the webhook's denial of an inline
		// volume): "volume <name>: <error>".
		return verdict{verdict: Refused, stage: optionsStage, detail: fmt.Sprintf("volume %s: %v", v.name, err)}
	}
	choice, err := credentials.Choose(credentialsConfig, v.attrs, v.hasKey)
	if err != nil {
		return verdict{verdict: Refused, stage: StageMount, detail: (&credentials.Error{Volume: v.name, Bucket: vol.Bucket, Reason: err.Error()}).Error()}
	}
	parts := []string{"bucket " + vol.Bucket}
	var mapped []string
	for _, m := range mappings {
		mapped = append(mapped, m.String())
	}
	if choice.FromGKEDriver {
		from := contract.AttrGKEIdentityProvider + "=" + v.attrs[contract.AttrGKEIdentityProvider]
		if pool, ok := v.attrs[contract.AttrGKEIdentityPool]; ok {
			from += " " + contract.AttrGKEIdentityPool + "=" + pool
		}
		mapped = append(mapped, from+" -> "+contract.AttrWorkloadIdentityProvider+"="+choice.Provider)
	}
	parts = append(parts, mapped...)
	if len(mapped) == 0 && len(vol.Flags) > 0 {
		parts = append(parts, "gcsfuse "+strings.Join(vol.Flags, " "))
	}
	creds := credentialsNote(choice)
	if creds != "" {
		parts = append(parts, creds)
	}
	if v.driver == contract.IncumbentDriverName {
		// What that takes is said once, in the report's summary (Report.Summary).
		parts = append(parts, "driver "+v.driver)
	}
	if len(mapped) > 0 {
		return verdict{Mapped, "", strings.Join(parts, "; "), mapped, creds}
	}
	return verdict{Unchanged, "", strings.Join(parts, "; "), nil, creds}
}

// credentialsNote says which identity the volume reads its bucket with, "" for
// Application Default Credentials (the default, unless the node plugin has --wif-provider).
func credentialsNote(c credentials.Choice) string {
	switch c.Kind {
	case credentials.KindKey:
		return "credentials: the service account key of its nodePublishSecretRef (checked at mount)"
	case credentials.KindFederation:
		s := "credentials: the pod's service account through " + c.Provider
		if c.ServiceAccount != "" {
			s += " as " + c.ServiceAccount
		}
		return s
	}
	return ""
}
