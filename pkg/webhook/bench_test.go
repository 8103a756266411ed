package webhook

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Admission is on the API server's path of every opted-in pod's creation: building the
// sidecar patch must cost microseconds, not milliseconds (the goal is admission p99 <= 20 ms
// end to end). go test -bench Mutate -benchmem ./pkg/webhook prints the figures.
func BenchmarkMutate(b *testing.B) {
	twoVolumes := func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, gcsVolume("out", map[string]string{contract.AttrFileCacheCapacity: "1Gi"}))
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "out", MountPath: "/out"})
	}
	cases := map[string]*corev1.Pod{
		"native-1-volume":  newPod(),
		"native-2-volumes": newPod(twoVolumes),
		"legacy-2-volumes": newPod(twoVolumes, annotate(contract.AnnotationSidecarMode, contract.ModeLegacy)),
	}
	for name, pod := range cases {
		b.Run(name, func(b *testing.B) {
			raw, err := json.Marshal(pod)
			if err != nil {
				b.Fatal(err)
			}
			m := newMutator(b, modern)
			req := createRequest(b, raw)
			if resp := m.Mutate(context.Background(), req); !resp.Allowed || len(resp.Patch) == 0 {
				b.Fatalf("not injected: %+v", resp.Result)
			}
			b.ReportAllocs()
			for b.Loop() {
				m.Mutate(context.Background(), req)
			}
		})
	}
}
