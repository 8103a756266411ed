// Command readme puts the figures a program printed into the Markdown file that holds them
// (docs/performance.md, docs/conformance.md, CONTRIBUTING.md; CONTRIBUTING.md, "Generated
// tables", lists which block is where), so that no figure is copied by hand
// (internal/readmegen has the marker format).
//
//	go run ./test/bench -rounds 20 -markdown /tmp/bench.md
//	go run ./hack/readme -file docs/performance.md < /tmp/bench.md          # every block in the input
//	go run ./hack/readme -file docs/performance.md -block bench < /tmp/bench.md   # only that one
//	go run ./hack/readme -file docs/conformance.md -block conformance < table.md  # plain Markdown
//	go run ./hack/readme -check README.md docs/*.md CONTRIBUTING.md         # the markers, well formed
//
// Input that holds blocks (a program's -markdown file) replaces the blocks of the same
// names, markers included, so the BEGIN marker names the command that wrote them. Input
// without markers (a program that prints plain Markdown, such as test/conformance/report)
// needs -block and replaces that block's content, keeping its BEGIN marker.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stderr)) }

func run(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("readme", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("file", "", "the Markdown file to splice the blocks of stdin into")
	block := fs.String("block", "", "splice only this block; required when stdin holds plain Markdown")
	check := fs.Bool("check", false, "check the markers of the files named as arguments; change nothing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *check {
		if fs.NArg() == 0 || *file != "" || *block != "" {
			fmt.Fprintln(stderr, "readme: -check takes the files as arguments and no other flag")
			return 2
		}
		bad := false
		for _, f := range fs.Args() {
			doc, err := os.ReadFile(f)
			if err == nil {
				_, err = readmegen.Parse(string(doc))
			}
			if err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", f, err)
				bad = true
			}
		}
		if bad {
			return 1
		}
		return 0
	}
	if *file == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "readme: want -file FILE [-block NAME] with the blocks on stdin, or -check FILE...")
		return 2
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "readme: stdin:", err)
		return 1
	}
	if err := splice(*file, *block, string(in), stderr); err != nil {
		fmt.Fprintln(stderr, "readme:", err)
		return 1
	}
	return 0
}

// splice replaces the blocks of input in file (or only block, or, for plain Markdown,
// block's content).
func splice(file, block, input string, stderr io.Writer) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	doc := string(raw)
	blocks, err := readmegen.Parse(input)
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	switch {
	case len(blocks) == 0 && block == "":
		return errors.New("stdin holds no generated block: name the block to fill with -block")
	case len(blocks) == 0 && strings.TrimSpace(input) == "":
		return errors.New("stdin is empty")
	case len(blocks) == 0:
		have, err := readmegen.Parse(doc)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var by string
		for _, b := range have {
			if b.Name == block {
				by = b.By
			}
		}
		if by == "" {
			return fmt.Errorf("%s has no block %q: add its markers where it belongs first", file, block)
		}
		b, err := readmegen.New(block, by, input)
		if err != nil {
			return err
		}
		blocks = []readmegen.Block{b}
	case block != "":
		var only []readmegen.Block
		for _, b := range blocks {
			if b.Name == block {
				only = append(only, b)
			}
		}
		if len(only) == 0 {
			return fmt.Errorf("stdin has no block %q", block)
		}
		blocks = only
	}
	out, err := readmegen.Splice(doc, blocks...)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := os.WriteFile(file, []byte(out), st.Mode().Perm()); err != nil {
		return err
	}
	for _, b := range blocks {
		fmt.Fprintf(stderr, "%s: block %s replaced (by %s)\n", file, b.Name, b.By)
	}
	return nil
}
