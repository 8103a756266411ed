// Package exitorder tallies, over an e2e run, whether each finished pod's sidecar was gone
// before the kubelet's first status with the app terminated. That is a race the sidecar wins
// by design but not always (a kubelet relist can fall inside the few tens of milliseconds
// between the runtime's report of the exit and the sidecar's exit), so a single pod that loses
// it proves nothing; a run in which most pods lose it shows a sidecar that waits for the API
// or the kubelet.
package exitorder

import (
	"fmt"
	"strings"
	"sync"
)

// Tally is safe for concurrent use by parallel tests. The zero value is ready.
type Tally struct {
	mu     sync.Mutex
	checks int
	lost   []string
}

// Add records one finished pod: why it lost the race (empty when it won).
func (t *Tally) Add(test string, lost []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checks++
	if len(lost) > 0 {
		t.lost = append(t.lost, test+": "+strings.Join(lost, "; "))
	}
}

// Verdict is a summary (empty when nothing was recorded) and whether the run fails: the
// sidecar won in at most half of the pods.
func (t *Tally) Verdict() (summary string, failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.checks == 0 {
		return "", false
	}
	won := t.checks - len(t.lost)
	var b strings.Builder
	fmt.Fprintf(&b, "zero-overhead exit: the sidecar was gone before the kubelet's first status with the app terminated in %d of %d finished pods", won, t.checks)
	for _, l := range t.lost {
		b.WriteString("\n  lost: " + l)
	}
	return b.String(), 2*won <= t.checks
}
