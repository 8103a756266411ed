package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docLink is a Markdown link's target: [text](target); codeSpan is what is not prose (an
// inline code span, or a fenced block), where brackets are no link.
var (
	docLink  = regexp.MustCompile(`(?:^|[^\\])\]\(([^)\s]+)\)`)
	codeSpan = regexp.MustCompile("(?s)```.*?```|`[^`\n]*`")
)

// slug is GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores
// dropped, spaces as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the headings' anchors of a Markdown file (outside code blocks).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if h, ok := strings.CutPrefix(line, "#"); ok && !fenced {
			base := slug(strings.TrimLeft(h, "#"))
			a := base
			for n := 1; out[a]; n++ { // GitHub numbers repeated headings: x, x-1, x-2
				a = base + "-" + strconv.Itoa(n)
			}
			out[a] = true
		}
	}
	return out
}

// Every relative link of the documentation a user reads (README.md, CONTRIBUTING.md,
// CHANGELOG.md, docs/, deploy/'s READMEs) resolves inside the repository: the file exists,
// and a #section of a Markdown file is one of its headings. A reviewer with only the README
// must never meet a dead link.
func TestDocumentationLinksResolve(t *testing.T) {
	repo := root(t)
	docs := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md"}
	for _, pattern := range []string{"docs/*.md", "deploy/*.md", "deploy/*/*.md", "deploy/chart/*/*.md"} {
		m, err := filepath.Glob(filepath.Join(repo, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(repo, f)
			docs = append(docs, rel)
		}
	}
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(filepath.Join(repo, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			path := filepath.Join(repo, filepath.Dir(doc), file)
			if file == "" {
				path = filepath.Join(repo, doc)
			}
			if !strings.HasPrefix(filepath.Clean(path), repo+string(filepath.Separator)) && filepath.Clean(path) != repo {
				t.Errorf("%s links %s, outside the repository", doc, target)
				continue
			}
			info, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s links %s: %v", doc, target, err)
				continue
			}
			if anchor == "" || info.IsDir() || !strings.HasSuffix(path, ".md") {
				continue
			}
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(text))[anchor] {
				t.Errorf("%s links %s: %s has no heading whose anchor is #%s", doc, target, file, anchor)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d relative links; is the documentation where this test looks?", checked)
	}
}
