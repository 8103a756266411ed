// Package readmegen keeps the figures of README.md and docs/*.md as the programs that
// measure them wrote them. Most README commits used to copy figures by hand from a
// program's output, which let a table drift from the program (a column renamed, a figure
// mistyped, a row from another run). A generated block is a stretch of Markdown between two
// HTML comments that name it and the command that rewrites it:
//
//	<!-- BEGIN GENERATED: bench (by go run ./test/bench -markdown FILE) -->
//	...
//	<!-- END GENERATED: bench -->
//
// A program writes its blocks with Write; hack/readme splices them into a file with Splice;
// Parse is the check that a file's markers are well formed (test/layout runs it on every
// Markdown file of the repository).
//
// Tooling, not product: it lives outside pkg/ and nothing under cmd/ imports it
// (test/layout checks that too).
package readmegen

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// namePattern is a block's name: short, lower case, no spaces, so that it reads the same in
// the marker, on a command line and in an error.
const namePattern = `[a-z0-9][a-z0-9.-]*`

var (
	nameRE  = regexp.MustCompile(`^` + namePattern + `$`)
	beginRE = regexp.MustCompile(`^<!-- BEGIN GENERATED: (` + namePattern + `) \(by (.*)\) -->$`)
	endRE   = regexp.MustCompile(`^<!-- END GENERATED: (` + namePattern + `) -->$`)
)

// Block is one generated block.
type Block struct {
	// Name identifies the block within its file.
	Name string
	// By is the command that regenerates it, as a reader would type it.
	By string
	// Body is the text between the two marker lines, each of its lines ending in "\n".
	Body string
	// begin and end are the marker lines' indexes in the parsed document.
	begin, end int
}

// isMarker says whether a line is meant as a marker, well formed or not: a comment that
// mentions GENERATED. Such a line is parsed strictly, so that a typo in a marker is an error
// instead of a block that silently stops being spliced.
func isMarker(line string) bool {
	return strings.HasPrefix(strings.TrimSpace(line), "<!--") && strings.Contains(line, "GENERATED")
}

// lines splits doc into lines without their "\n"; a final line without one counts too.
func lines(doc string) []string {
	ls := strings.SplitAfter(doc, "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	for i, l := range ls {
		ls[i] = strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "\r")
	}
	return ls
}

// Parse returns the blocks of a Markdown document in order, or every problem with its
// markers: a malformed marker, a BEGIN without a command, an END without its BEGIN or with
// another name, a BEGIN inside another block (blocks do not nest), a BEGIN never ended, and
// a name used twice (a splice would not know which to replace). Lines are 1-based in errors.
func Parse(doc string) ([]Block, error) {
	var (
		blocks []Block
		errs   []error
		open   *Block
		seen   = map[string]int{} // name -> line of its BEGIN
	)
	ls := lines(doc)
	for i, l := range ls {
		if !isMarker(l) {
			continue
		}
		if m := beginRE.FindStringSubmatch(l); m != nil {
			name, by := m[1], strings.TrimSpace(m[2])
			switch {
			case by == "":
				errs = append(errs, fmt.Errorf("line %d: block %q names no command that writes it: want %q", i+1, name, beginMarker(name, "COMMAND")))
			case strings.Contains(by, "-->"):
				errs = append(errs, fmt.Errorf("line %d: block %q: its command contains \"-->\", which ends the comment", i+1, name))
			}
			if open != nil {
				errs = append(errs, fmt.Errorf("line %d: block %q begins inside block %q (line %d): blocks do not nest", i+1, name, open.Name, open.begin+1))
				continue
			}
			if first, dup := seen[name]; dup {
				errs = append(errs, fmt.Errorf("line %d: block %q again (first at line %d): names are unique within a file", i+1, name, first))
			}
			seen[name] = i + 1
			open = &Block{Name: name, By: by, begin: i}
			continue
		}
		if m := endRE.FindStringSubmatch(l); m != nil {
			switch {
			case open == nil:
				errs = append(errs, fmt.Errorf("line %d: END of block %q without its BEGIN", i+1, m[1]))
			case m[1] != open.Name:
				errs = append(errs, fmt.Errorf("line %d: END of block %q inside block %q (line %d)", i+1, m[1], open.Name, open.begin+1))
			default:
				open.end = i
				open.Body = joinLines(ls[open.begin+1 : i])
				blocks = append(blocks, *open)
				open = nil
			}
			continue
		}
		errs = append(errs, fmt.Errorf("line %d: malformed marker %q: want %q or %q", i+1, l, beginMarker("NAME", "COMMAND"), endMarker("NAME")))
	}
	if open != nil {
		errs = append(errs, fmt.Errorf("line %d: block %q has no END", open.begin+1, open.Name))
	}
	return blocks, errors.Join(errs...)
}

func joinLines(ls []string) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func beginMarker(name, by string) string {
	return "<!-- BEGIN GENERATED: " + name + " (by " + by + ") -->"
}
func endMarker(name string) string { return "<!-- END GENERATED: " + name + " -->" }

// Format is b as it stands in a file: its markers around its body.
func (b Block) Format() string {
	return beginMarker(b.Name, b.By) + "\n" + b.Body + endMarker(b.Name) + "\n"
}

// New is the block name by command holding content, set off by blank lines from its markers
// (a Markdown table right under an HTML comment line would not render as one).
func New(name, by, content string) (Block, error) {
	b := Block{Name: name, By: by, Body: "\n" + strings.Trim(content, "\n") + "\n\n"}
	return b, b.check()
}

// check fails on a name or command the markers could not carry, and on a body that holds
// markers itself.
func (b Block) check() error {
	if !nameRE.MatchString(b.Name) {
		return fmt.Errorf("block name %q: want %s", b.Name, namePattern)
	}
	if b.Body != "" && !strings.HasSuffix(b.Body, "\n") {
		return fmt.Errorf("block %q: its body does not end in a newline", b.Name)
	}
	bs, err := Parse(b.Format())
	if err != nil {
		return fmt.Errorf("block %q: %w", b.Name, err)
	}
	if len(bs) != 1 {
		return fmt.Errorf("block %q: its content holds markers", b.Name)
	}
	return nil
}

// Write writes blocks, one after the other, to w: what a program's -markdown file holds.
func Write(w io.Writer, blocks ...Block) error {
	for i, b := range blocks {
		if err := b.check(); err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(w, b.Format()); err != nil {
			return err
		}
	}
	return nil
}

// Splice replaces, in doc, each block of the same name as one of blocks, markers included:
// the BEGIN line then names the command that wrote the new content. Text outside the
// blocks is kept byte for byte. A block doc does not have is an error, not an addition:
// where a block goes is the author's choice, made once by writing its markers.
func Splice(doc string, blocks ...Block) (string, error) {
	have, err := Parse(doc)
	if err != nil {
		return "", fmt.Errorf("the document's markers: %w", err)
	}
	byName := map[string]Block{}
	for _, b := range have {
		byName[b.Name] = b
	}
	replace := map[int]Block{} // BEGIN line -> new block
	for _, b := range blocks {
		if err := b.check(); err != nil {
			return "", err
		}
		old, ok := byName[b.Name]
		if !ok {
			return "", fmt.Errorf("no block %q in the document: add its markers where it belongs first", b.Name)
		}
		if _, twice := replace[old.begin]; twice {
			return "", fmt.Errorf("block %q given twice", b.Name)
		}
		replace[old.begin] = b
	}
	ls := strings.SplitAfter(doc, "\n")
	var out strings.Builder
	for i := 0; i < len(ls); i++ {
		nb, ok := replace[i]
		if !ok {
			out.WriteString(ls[i])
			continue
		}
		text := nb.Format()
		i = byName[nb.Name].end
		if !strings.HasSuffix(ls[i], "\n") { // the END marker was the document's last line
			text = strings.TrimSuffix(text, "\n")
		}
		out.WriteString(text)
	}
	return out.String(), nil
}

// Table is a Markdown table, header first; a "|" in a cell is escaped so that it stays in
// its cell.
func Table(header []string, rows ...[]string) string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			if c != "" {
				b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`))
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	line(header)
	b.WriteString(strings.Repeat("|---", len(header)) + "|\n")
	for _, r := range rows {
		line(r)
	}
	return b.String()
}
