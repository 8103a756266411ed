package readmegen

import (
	"strings"
	"testing"
)

const doc = `# Title

Prose before.

<!-- BEGIN GENERATED: one (by go run ./test/bench -markdown FILE) -->

| a | b |
|---|---|
| 1 | 2 |

<!-- END GENERATED: one -->

Prose between, which mentions BEGIN GENERATED in passing.

<!-- BEGIN GENERATED: two.v1 (by hack/scale.sh) -->
old two
<!-- END GENERATED: two.v1 -->
Prose after.
`

func TestParse(t *testing.T) {
	bs, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 {
		t.Fatalf("got %d blocks, want 2: %+v", len(bs), bs)
	}
	if b := bs[0]; b.Name != "one" || b.By != "go run ./test/bench -markdown FILE" || b.Body != "\n| a | b |\n|---|---|\n| 1 | 2 |\n\n" {
		t.Errorf("first block = %+v", b)
	}
	if b := bs[1]; b.Name != "two.v1" || b.By != "hack/scale.sh" || b.Body != "old two\n" {
		t.Errorf("second block = %+v", b)
	}
	if bs, err := Parse("no markers at all\n"); err != nil || len(bs) != 0 {
		t.Errorf("Parse(no markers) = %v, %v", bs, err)
	}
}

// Each malformed case names the problem, with the line it is on.
func TestParseMalformed(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"END without BEGIN", "x\n<!-- END GENERATED: a -->\n", "line 2: END of block \"a\" without its BEGIN"},
		{"BEGIN without END", "<!-- BEGIN GENERATED: a (by cmd) -->\nbody\n", "line 1: block \"a\" has no END"},
		{"END of another block", "<!-- BEGIN GENERATED: a (by cmd) -->\n<!-- END GENERATED: b -->\n", "line 2: END of block \"b\" inside block \"a\""},
		{"nested", "<!-- BEGIN GENERATED: a (by cmd) -->\n<!-- BEGIN GENERATED: b (by cmd) -->\n<!-- END GENERATED: b -->\n<!-- END GENERATED: a -->\n",
			"line 2: block \"b\" begins inside block \"a\" (line 1)"},
		{"duplicate", "<!-- BEGIN GENERATED: a (by cmd) -->\n<!-- END GENERATED: a -->\n<!-- BEGIN GENERATED: a (by cmd) -->\n<!-- END GENERATED: a -->\n",
			"line 3: block \"a\" again (first at line 1)"},
		{"no command", "<!-- BEGIN GENERATED: a (by  ) -->\n<!-- END GENERATED: a -->\n", "block \"a\" names no command"},
		{"no by at all", "<!-- BEGIN GENERATED: a -->\n<!-- END GENERATED: a -->\n", "line 1: malformed marker"},
		{"command ends the comment", "<!-- BEGIN GENERATED: a (by x --> y) -->\n<!-- END GENERATED: a -->\n", "contains \"-->\""},
		{"name with a space", "<!-- BEGIN GENERATED: a b (by cmd) -->\n<!-- END GENERATED: a b -->\n", "line 1: malformed marker"},
		{"missing colon", "<!-- BEGIN GENERATED a (by cmd) -->\n", "malformed marker"},
		{"indented", "  <!-- END GENERATED: a -->\n", "malformed marker"},
		{"trailing text", "<!-- END GENERATED: a --> more\n", "malformed marker"},
		{"upper case name", "<!-- BEGIN GENERATED: Bench (by cmd) -->\n<!-- END GENERATED: Bench -->\n", "malformed marker"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.doc)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestSplice(t *testing.T) {
	nb, err := New("two.v1", "SCALE_MARKDOWN=FILE hack/scale.sh", "\n\n| x |\n|---|\n| 9 |\n")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Splice(doc, nb)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(doc, "<!-- BEGIN GENERATED: two.v1 (by hack/scale.sh) -->\nold two\n<!-- END GENERATED: two.v1 -->\n",
		"<!-- BEGIN GENERATED: two.v1 (by SCALE_MARKDOWN=FILE hack/scale.sh) -->\n\n| x |\n|---|\n| 9 |\n\n<!-- END GENERATED: two.v1 -->\n", 1)
	if got != want {
		t.Errorf("Splice:\n%s\nwant:\n%s", got, want)
	}
	// Splicing a block's own text back changes nothing; so does splicing nothing.
	bs, _ := Parse(doc)
	for _, same := range [][]Block{bs, nil} {
		if again, err := Splice(doc, same...); err != nil || again != doc {
			t.Errorf("Splice(doc, %d of its own blocks) = %q, %v; want doc unchanged", len(same), again, err)
		}
	}
	// Both blocks at once, the second the file's last line without a newline.
	last := strings.TrimSuffix(strings.TrimSuffix(doc, "Prose after.\n"), "\n")
	one, _ := New("one", "cmd", "new one")
	got, err = Splice(last, one, nb)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, "| 9 |\n\n<!-- END GENERATED: two.v1 -->") || !strings.Contains(got, "Prose before.\n\n<!-- BEGIN GENERATED: one (by cmd) -->\n\nnew one\n\n<!-- END GENERATED: one -->\n\nProse between") {
		t.Errorf("Splice of both:\n%s", got)
	}
	if bs, err := Parse(got); err != nil || len(bs) != 2 {
		t.Errorf("the spliced document: %d blocks, %v", len(bs), err)
	}
}

func TestSpliceRefuses(t *testing.T) {
	ok, _ := New("one", "cmd", "x")
	for _, c := range []struct {
		name   string
		doc    string
		blocks []Block
		want   string
	}{
		{"a block the document lacks", doc, []Block{{Name: "three", By: "cmd", Body: "x\n"}}, "no block \"three\""},
		{"a malformed document", "<!-- BEGIN GENERATED: one (by cmd) -->\n", []Block{ok}, "has no END"},
		{"content with a marker", doc, []Block{{Name: "one", By: "cmd", Body: "<!-- END GENERATED: one -->\n"}}, "END of block"},
		{"content with a malformed marker", doc, []Block{{Name: "one", By: "cmd", Body: "<!-- GENERATED -->\n"}}, "malformed marker"},
		{"no command", doc, []Block{{Name: "one", Body: "x\n"}}, "names no command"},
		{"a bad name", doc, []Block{{Name: "One", By: "cmd", Body: "x\n"}}, "block name"},
		{"the same block twice", doc, []Block{ok, ok}, "given twice"},
		{"a body without its newline", doc, []Block{{Name: "one", By: "cmd", Body: "x"}}, "newline"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Splice(c.doc, c.blocks...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Splice = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// What a program writes is what Parse reads back, block for block.
func TestWriteParses(t *testing.T) {
	a, err := New("a", "go run ./x", "| h |\n|---|\n| 1 |")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New("b", "go run ./y -markdown FILE", "line\n")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := Write(&out, a, b); err != nil {
		t.Fatal(err)
	}
	bs, err := Parse(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 2 || bs[0].Body != "\n| h |\n|---|\n| 1 |\n\n" || bs[1].Body != "\nline\n\n" || bs[1].By != "go run ./y -markdown FILE" {
		t.Errorf("read back %+v from\n%s", bs, out.String())
	}
	if _, err := New("a", "cmd", "<!-- BEGIN GENERATED: c (by x) -->\n<!-- END GENERATED: c -->"); err == nil {
		t.Error("New accepted content holding a block")
	}
	if err := Write(&out, Block{Name: "a b", By: "x", Body: "\n"}); err == nil {
		t.Error("Write accepted a block it could not mark")
	}
}

func TestTable(t *testing.T) {
	got := Table([]string{"", "x"}, []string{"a|b", ""}, []string{"c", "1"})
	want := "| | x |\n|---|---|\n| a\\|b | |\n| c | 1 |\n"
	if got != want {
		t.Errorf("Table = %q, want %q", got, want)
	}
}
