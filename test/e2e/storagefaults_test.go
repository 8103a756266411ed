package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestBackendFaultsDuringTheWrite: the storage backend misbehaves while the app uploads (503s,
// dropped connections, a slow answer; the emulator's faults of a bucket's writes), in each
// mode: gcsfuse's retries carry the app through, the pod ends Succeeded with every byte of
// its object (size and MD5), and the fault was met (the upload reached the backend as the
// test meant). The integration suite has the rest of the matrix (reads, listings, stats, a
// backend down for good, a drain during a slow upload: test/integration/storagefaults_test.go).
func TestBackendFaultsDuringTheWrite(t *testing.T) {
	parallel(t)
	for _, c := range []struct {
		name, mode string
		attrs      map[string]string
		fault      map[string]any
	}{
		{"native-503", contract.ModeNative, nil, map[string]any{"op": "write", "status": http.StatusServiceUnavailable, "count": 3}},
		{"legacy-dropped", contract.ModeLegacy, nil, map[string]any{"op": "write", "drop": true, "count": 2}},
		{"shared-slow", "", sharedAttrs, map[string]any{"op": "write", "delayMs": 4000, "count": 1}},
		{"shared-503", "", sharedAttrs, map[string]any{"op": "write", "status": http.StatusServiceUnavailable, "count": 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bucket := newBucket(t)
			admin(t, http.MethodPut, "faults/"+bucket, c.fault)
			t.Cleanup(func() { admin(t, http.MethodDelete, "faults/"+bucket, nil) })
			name := podName(t, "")
			start := time.Now()
			createPod(t, name, podOpts{
				mode: c.mode, restart: corev1.RestartPolicyNever, attrs: c.attrs,
				volumes: []volume{{"bucket", bucket, mountPath}},
				args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", "1048576"},
			})
			p := waitPod(t, name, 150*time.Second, "terminal phase", terminal)
			if p.Status.Phase != corev1.PodSucceeded {
				t.Fatalf("pod %s, want Succeeded through the backend's faults:\n%s\napp log:\n%s", p.Status.Phase, describe(p), logs(name, "app"))
			}
			expectObject(t, bucket, "out.bin", 1048576)
			var left map[string]int
			if err := json.Unmarshal(admin(t, http.MethodGet, "faults/"+bucket, nil), &left); err != nil || len(left) != 0 {
				t.Fatalf("faults not met: %v %v (the upload did not meet them: the test proved nothing)", left, err)
			}
			t.Logf("timing %s: pod created -> Succeeded through the faults: %s", c.name, time.Since(start).Round(time.Millisecond))
		})
	}
}
