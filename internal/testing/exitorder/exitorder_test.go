package exitorder

import (
	"strings"
	"sync"
	"testing"
)

func TestVerdict(t *testing.T) {
	lost := []string{"the sidecar exited 21ms after the kubelet reported the app terminated"}
	for _, tc := range []struct {
		name       string
		won, lost  int
		wantFailed bool
		wantLine   string
	}{
		{"every pod won", 6, 0, false, "in 6 of 6 finished pods"},
		{"one relist inside the window", 5, 1, false, "in 5 of 6 finished pods"},
		{"half lost", 3, 3, true, "in 3 of 6 finished pods"},
		{"a sidecar that waits for the kubelet loses everywhere", 0, 6, true, "in 0 of 6 finished pods"},
		{"a single pod that lost", 0, 1, true, "in 0 of 1 finished pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tl Tally
			for i := 0; i < tc.won; i++ {
				tl.Add("won", nil)
			}
			for i := 0; i < tc.lost; i++ {
				tl.Add("TestJobNever/success/legacy", lost)
			}
			summary, failed := tl.Verdict()
			if failed != tc.wantFailed {
				t.Errorf("failed = %v, want %v:\n%s", failed, tc.wantFailed, summary)
			}
			if !strings.Contains(summary, tc.wantLine) {
				t.Errorf("summary %q does not say %q", summary, tc.wantLine)
			}
			if got := strings.Count(summary, "\n  lost: TestJobNever/success/legacy: "+lost[0]); got != tc.lost {
				t.Errorf("summary names %d losses, want %d:\n%s", got, tc.lost, summary)
			}
		})
	}
}

func TestNothingRecorded(t *testing.T) {
	var tl Tally
	if summary, failed := tl.Verdict(); summary != "" || failed {
		t.Errorf("empty tally: %q, %v; want no summary and no failure", summary, failed)
	}
}

func TestConcurrentAdds(t *testing.T) {
	var tl Tally
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if i%10 == 0 {
				tl.Add("lost", []string{"api view"})
				return
			}
			tl.Add("won", nil)
		}(i)
	}
	wg.Wait()
	if summary, failed := tl.Verdict(); failed || !strings.Contains(summary, "in 45 of 50 finished pods") {
		t.Errorf("%v:\n%s", failed, summary)
	}
}
