package chart

import (
	"slices"
	"testing"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// TestProfileClasses: with profileClasses.bucket the chart renders the three classes of
// gcsfuse's profiles, of the driver's provisioner, each with its profile and the file cache,
// and whose parameters and mount options the provisioner and the node plugin take (the
// same checks they make); without a bucket, none.
func TestProfileClasses(t *testing.T) {
	refuteKind(t, render(t, otherNS), "StorageClass")

	r := render(t, otherNS, "--set", "profileClasses.bucket=team-bucket", "--set", "profileClasses.pathPrefix=ml",
		"--set", "driverName="+edgeDriver)
	for class, profile := range map[string]string{"training": "aiml-training", "serving": "aiml-serving", "checkpointing": "aiml-checkpointing"} {
		sc := only[*storagev1.StorageClass](t, r, "gcsfuse-"+class)
		if sc.Provisioner != edgeDriver || sc.Parameters["bucketName"] != "team-bucket" || sc.Parameters["pathPrefix"] != "ml" ||
			sc.Parameters["fileCacheCapacity"] != "20Gi" || !slices.Equal(sc.MountOptions, []string{"profile:" + profile}) {
			t.Errorf("class %s: provisioner %s, parameters %v, mountOptions %v", sc.Name, sc.Provisioner, sc.Parameters, sc.MountOptions)
		}
		if sc.ReclaimPolicy == nil || *sc.ReclaimPolicy != "Delete" || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			t.Errorf("class %s: reclaimPolicy %v, volumeBindingMode %v", sc.Name, sc.ReclaimPolicy, sc.VolumeBindingMode)
		}
		c, err := classparams.Parse(sc.Parameters)
		if err != nil {
			t.Errorf("class %s: the provisioner refuses its parameters: %v", sc.Name, err)
			continue
		}
		v, err := mountopts.FromAttributes(c.VolumeAttributes(c.Dir(classparams.ExampleVolumeName)), sc.MountOptions, "")
		if err != nil || !slices.Contains(v.Flags, "--profile="+profile) || !mountopts.FlagsWantFileCache(v.Flags) {
			t.Errorf("class %s: the node plugin mounts it with %+v (%v), want --profile=%s and a file cache", sc.Name, v, err, profile)
		}
	}

	r = render(t, otherNS, "--set", "profileClasses.bucket=team-bucket", "--set", "profileClasses.fileCacheCapacity=0", "--set", "profileClasses.namePrefix=ai-")
	if sc := only[*storagev1.StorageClass](t, r, "ai-serving"); sc.Parameters["fileCacheCapacity"] != "" {
		t.Errorf("fileCacheCapacity 0: parameters %v, want no file cache", sc.Parameters)
	}
}
