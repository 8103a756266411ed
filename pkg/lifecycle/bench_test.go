package lifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The node plugin calls Decide for every pod change of its node and on every runtime change
// of a followed pod: with 110 pods of a few containers it must stay in the microseconds and
// allocate little. go test -bench Decide -benchmem ./pkg/lifecycle prints the figures.
func BenchmarkDecide(b *testing.B) {
	cases := []struct {
		name string
		pod  *corev1.Pod
		done bool
	}{
		{"legacy-running", legacyPod([]string{"main", "log"}, statuses(running("main"), running("log"))), false},
		{"legacy-done", legacyPod([]string{"main", "log"}, statuses(terminated("main", 0, t1), terminated("log", 0, t2))), true},
		{"native-done", nativePod([]string{"main"}, statuses(terminated("main", 0, t1))), true},
		{"onfailure-backoff", legacyPod([]string{"main"}, restart(corev1.RestartPolicyOnFailure), statuses(backOff("main", 1, t1))), false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			if d := Decide(c.pod); d.Done != c.done {
				b.Fatalf("Decide = %+v, want Done=%v", d, c.done)
			}
			b.ReportAllocs()
			for b.Loop() {
				Decide(c.pod)
			}
		})
	}
}
