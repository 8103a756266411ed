package layout

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxGoFileLines bounds a Go file of the product's code, its tests and its scripts (issue
// 39): past it a file holds more than one job, and a reader cannot keep it in view.
const maxGoFileLines = 800

// TestNoGoFileOverTheBound: no .go file under pkg/, cmd/, hack/ or internal/ (tests
// included) is longer than maxGoFileLines; split one by job when it grows past it.
func TestNoGoFileOverTheBound(t *testing.T) {
	checked := 0
	for _, dir := range []string{"pkg", "cmd", "hack", "internal"} {
		err := filepath.WalkDir(filepath.Join(root(t), dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			checked++
			if n := bytes.Count(b, []byte("\n")); n > maxGoFileLines {
				rel, _ := filepath.Rel(root(t), path)
				t.Errorf("%s has %d lines, more than %d: split it by job", rel, n, maxGoFileLines)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 100 {
		t.Fatalf("only %d Go files found under pkg/, cmd/, hack/ and internal/: wrong root?", checked)
	}
}
