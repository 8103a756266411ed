package lazyre

import (
	"strings"
	"sync"
	"testing"
)

func TestCompiledAtFirstUse(t *testing.T) {
	r := New(`^a(b+)$`)
	if r.re != nil {
		t.Fatal("compiled by New")
	}
	if r.String() != `^a(b+)$` || r.re != nil {
		t.Fatal("String compiled it, or changed the expression")
	}
	if !r.MatchString("abb") || r.MatchString("ab c") || !r.Match([]byte("ab")) {
		t.Error("matches differ from regexp's")
	}
	if m := r.FindStringSubmatch("abbb"); len(m) != 2 || m[1] != "bbb" {
		t.Errorf("FindStringSubmatch = %q", m)
	}
}

func TestConcurrentFirstUse(t *testing.T) {
	r := New(`^[a-z]{1,63}$`)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if !r.MatchString("abc") {
				t.Error("no match")
			}
		})
	}
	wg.Wait()
}

// A bad expression panics at its first use and at every later one, naming itself; CompileAll
// reports it.
func TestBadExpression(t *testing.T) {
	r := New(`(`)
	for i := range 2 {
		func() {
			defer func() {
				v := recover()
				if err, ok := v.(error); !ok || !strings.Contains(err.Error(), `"("`) {
					t.Errorf("use %d: panic %v, want an error naming the expression", i, v)
				}
			}()
			r.MatchString("x")
		}()
	}
	n, err := CompileAll()
	if n < 1 || err == nil || !strings.Contains(err.Error(), `"("`) {
		t.Errorf("CompileAll = %d, %v; want the bad expression's error", n, err)
	}
}
