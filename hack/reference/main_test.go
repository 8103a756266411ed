package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../.."

// docs/reference.md is exactly what the code says today: a change to an attribute, an
// annotation, a mount option's policy, a refusal's words or a chart value fails here until
// the reference is written again.
func TestReferenceIsCurrent(t *testing.T) {
	want, err := generate(root)
	if err != nil {
		t.Fatalf("generating the reference: %v", err)
	}
	have, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatalf("%v (write it: %s)", err, command)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("docs/reference.md differs from what the code says; run %s\n%s", command, firstDifference(string(have), string(want)))
	}
}

// firstDifference shows the first line where have and want differ.
func firstDifference(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(h) || i < len(w); i++ {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return fmt.Sprintf("first difference, line %d:\n  file: %q\n  code: %q", i+1, hl, wl)
		}
	}
	return "(no line differs: line endings?)"
}

// Writing twice gives the same bytes: nothing in the reference comes from map order.
func TestReferenceIsStable(t *testing.T) {
	a, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs differ:\n%s", firstDifference(string(a), string(b)))
	}
}

// A name in the code without an entry here, or an entry whose name left the code, stops the
// generator with a message naming it.
func TestDifferNamesBothWays(t *testing.T) {
	err := differ("things", []string{"A", "B"}, []string{"B", "C"})
	if err == nil || !strings.Contains(err.Error(), "A is new") || !strings.Contains(err.Error(), "C is gone") {
		t.Fatalf("differ: %v", err)
	}
	if err := differ("things", nil, nil); err == nil {
		t.Fatal("differ accepted finding nothing in the code")
	}
	if err := differ("things", []string{"A"}, []string{"A"}); err != nil {
		t.Fatal(err)
	}
}

// values.yaml is read line by line for its order and comments; a line it does not
// understand stops it rather than being misread.
func TestScanValues(t *testing.T) {
	keys, err := scanValues("# top\n\n# a's\na:\n  # b's\n  b: 1\n  c: {}\nd: x\n")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(keys)
	if want := "[{a a's} {a.b b's} {a.c } {d }]"; got != want {
		t.Errorf("keys %s, want %s", got, want)
	}
	if _, err := scanValues("a:\n  - x\n"); err == nil {
		t.Error("a block list was accepted")
	}
}

func TestMarkdownEscapes(t *testing.T) {
	if got := md("a|b <ns> *x* `c|*d*`"); got != "a\\|b \\<ns> \\*x\\* `c\\|*d*`" {
		t.Errorf("md: %q", got)
	}
	if got := code("a`b|c"); got != "``a`b\\|c``" {
		t.Errorf("code: %q", got)
	}
}
