// Package backoff builds the one retry pacing this repository uses: a wait that starts at
// first and doubles up to max, then stays there. It is apimachinery's wait.Backoff, which the
// Kubernetes components use, so that every retry loop here is paced the same way.
package backoff

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Doubling returns a backoff whose Step gives first, 2*first, 4*first, ... capped at max,
// then max for ever.
func Doubling(first, max time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: first, Factor: 2, Cap: max, Steps: math.MaxInt}
}
