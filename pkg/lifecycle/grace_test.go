package lifecycle

import (
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestAppliedGraceSeconds(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name         string
		deletion     *int64
		spec         *int64
		want         int64
		wantDuration time.Duration
	}{
		{"deletion's grace wins over the spec's", n(7), n(60), 7, 7 * time.Second},
		{"force delete: 0 wins over the spec's", n(0), n(60), 0, 0},
		{"negative deletion grace counts as 0", n(-3), n(60), 0, 0},
		{"spec's grace when not deleted with another", nil, n(45), 45, 45 * time.Second},
		{"negative spec grace counts as 0", nil, n(-1), 0, 0},
		{"neither: Kubernetes' default", nil, nil, contract.DefaultGraceSeconds, contract.DefaultGraceSeconds * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := legacyPod([]string{"app"}, deleting())
			p.DeletionGracePeriodSeconds, p.Spec.TerminationGracePeriodSeconds = tt.deletion, tt.spec
			if got := AppliedGraceSeconds(p); got != tt.want {
				t.Fatalf("AppliedGraceSeconds = %d, want %d", got, tt.want)
			}
			if got := AppliedGrace(p); got != tt.wantDuration {
				t.Fatalf("AppliedGrace = %s, want %s", got, tt.wantDuration)
			}
		})
	}
}
