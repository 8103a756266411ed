// Package waitfor is the tests' bounded poll: a condition that becomes true within a bound,
// or a failure that names what was awaited. One copy for every package's tests, so that each
// wait has the same bound semantics and message.
package waitfor

import (
	"testing"
	"time"
)

// poll is how often the condition is asked again.
const poll = 10 * time.Millisecond

// Until polls cond until it is true, failing t (naming what) if it is not within d.
func Until(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(poll)
	}
}
