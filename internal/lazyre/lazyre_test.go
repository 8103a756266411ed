package lazyre

import (
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

func TestBadExpressionPanicsAtFirstUse(t *testing.T) {
	r := New(`(`)
	defer func() {
		if recover() == nil {
			t.Error("a bad expression did not panic at its first use")
		}
	}()
	r.MatchString("x")
}
