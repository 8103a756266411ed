package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestInlineVolumeRefusedAtAdmission: an inline volume that the node plugin would refuse for
// what the pod says (an option outside the allowlist, a boolean that is not one, a bad
// bucket name, an unknown attribute, an fsType) is denied at admission with the node
// plugin's reason and the volume's name, instead of a pod stuck in ContainerCreating; a
// valid one is admitted, and a volume of another driver is not read.
func TestInlineVolumeRefusedAtAdmission(t *testing.T) {
	m := newMutator(t, modern)
	for _, tt := range []struct {
		name  string
		attrs map[string]string
		fs    string
		deny  []string
	}{
		{"unknown option", map[string]string{contract.AttrMountOptions: "no-such-option"}, "", []string{"volume data:", `mount option "no-such-option"`, "not a supported gcsfuse option"}},
		{"invalid boolean", map[string]string{contract.AttrMountOptions: "implicit-dirs=maybe"}, "", []string{"volume data:", `value "maybe" is not true or false`}},
		{"invalid bucket", map[string]string{contract.AttrBucketName: "Not_A.Bucket!"}, "", []string{"volume data:", `bucket name "Not_A.Bucket!"`}},
		{"unknown attribute", map[string]string{"bucket": "b"}, "", []string{"volume data:", `unknown volume attribute "bucket"`}},
		{"fsType", nil, "ext4", []string{"volume data:", `fs_type "ext4" is not supported`}},
		{"valid", map[string]string{contract.AttrMountOptions: "implicit-dirs,only-dir=a"}, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := newPod(func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{gcsVolume("data", tt.attrs)}
				if tt.fs != "" {
					p.Spec.Volumes[0].CSI.FSType = &tt.fs
				}
			})
			resp, _ := admit(t, m, pod)
			if tt.deny == nil {
				if !resp.Allowed {
					t.Fatalf("valid volume denied: %v", resp.Result)
				}
				return
			}
			assertDenied(t, resp, tt.deny...)
		})
	}
	other := newPod(func(p *corev1.Pod) {
		v := gcsVolume("data", map[string]string{contract.AttrMountOptions: "no-such-option"})
		v.CSI.Driver = "other.csi.example"
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "other", VolumeSource: v.VolumeSource})
	})
	if resp, _ := admit(t, m, other); !resp.Allowed {
		t.Fatalf("another driver's volume was judged by our allowlist: %v", resp.Result)
	}
}
