package waitfor

import (
	"testing"
	"time"
)

// fakeTB records a failure instead of ending the test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func TestUntilReturnsOnceTrue(t *testing.T) {
	n := 0
	Until(t, time.Second, "the third ask", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("asked %d times, want 3", n)
	}
}

func TestUntilFailsPastItsBound(t *testing.T) {
	f := &fakeTB{}
	start := time.Now()
	func() {
		defer func() { _ = recover() }()
		Until(f, 50*time.Millisecond, "never", func() bool { return false })
	}()
	if f.failed == "" {
		t.Fatal("a condition never true did not fail the test")
	}
	if took := time.Since(start); took < 50*time.Millisecond || took > 2*time.Second {
		t.Fatalf("failed after %s, want just past its 50ms bound", took)
	}
}
