package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const readme = `# T

<!-- BEGIN GENERATED: bench (by go run ./test/bench -markdown FILE) -->
old bench
<!-- END GENERATED: bench -->

<!-- BEGIN GENERATED: conformance (by hack/conformance.sh) -->
old table
<!-- END GENERATED: conformance -->
`

func runOn(t *testing.T, file, stdin string, args ...string) (int, string) {
	t.Helper()
	var stderr strings.Builder
	code := run(append([]string{"-file", file}, args...), strings.NewReader(stdin), &stderr)
	return code, stderr.String()
}

func TestSpliceFromStdin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(file, []byte(readme), 0o644); err != nil {
		t.Fatal(err)
	}
	// A program's -markdown file: its block replaces the README's, command included.
	in := "<!-- BEGIN GENERATED: bench (by go run ./test/bench -rounds 20 -markdown FILE) -->\n\nnew bench\n\n<!-- END GENERATED: bench -->\n"
	if code, out := runOn(t, file, in); code != 0 {
		t.Fatalf("marked input: exit %d: %s", code, out)
	}
	// Plain Markdown: the content of the named block, its BEGIN marker kept.
	if code, out := runOn(t, file, "| new | table |\n", "-block", "conformance"); code != 0 {
		t.Fatalf("plain input: exit %d: %s", code, out)
	}
	got, _ := os.ReadFile(file)
	want := `# T

<!-- BEGIN GENERATED: bench (by go run ./test/bench -rounds 20 -markdown FILE) -->

new bench

<!-- END GENERATED: bench -->

<!-- BEGIN GENERATED: conformance (by hack/conformance.sh) -->

| new | table |

<!-- END GENERATED: conformance -->
`
	if string(got) != want {
		t.Errorf("README after both splices:\n%s\nwant:\n%s", got, want)
	}
	for _, c := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"plain without -block", "| x |\n", nil, "name the block"},
		{"a block the file lacks", "x\n", []string{"-block", "scale"}, "has no block \"scale\""},
		{"-block not in the input", in, []string{"-block", "conformance"}, "stdin has no block \"conformance\""},
		{"empty input", "", []string{"-block", "bench"}, "stdin is empty"},
		{"malformed input", "<!-- BEGIN GENERATED: bench (by x) -->\n", nil, "has no END"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, out := runOn(t, file, c.stdin, c.args...); code != 1 || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, %q; want 1 and %q", code, out, c.want)
			}
			if after, _ := os.ReadFile(file); string(after) != want {
				t.Errorf("the file changed on a refused splice:\n%s", after)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.md"), filepath.Join(dir, "bad.md")
	_ = os.WriteFile(good, []byte(readme), 0o644)
	_ = os.WriteFile(bad, []byte("<!-- END GENERATED: x -->\n"), 0o644)
	var stderr strings.Builder
	if code := run([]string{"-check", good}, strings.NewReader(""), &stderr); code != 0 {
		t.Errorf("-check of a good file: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"-check", good, bad}, strings.NewReader(""), &stderr); code != 1 || !strings.Contains(stderr.String(), "bad.md: line 1: END of block \"x\" without its BEGIN") {
		t.Errorf("-check of a bad file: exit %d: %s", code, stderr.String())
	}
}
