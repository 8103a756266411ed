// Command reference writes docs/reference.md: every volume attribute, StorageClass
// parameter, pod annotation, mount option and chart value, from the code's own tables and
// answers, so that the reference cannot drift from the code (main_test.go fails when the
// file differs from what this prints).
//
//	go run ./hack/reference -o docs/reference.md
//
// Where it reads what:
//   - names: the constants of pkg/contract (Attr*, Ctx*, Annotation*), the GKE driver's
//     volume attributes (pkg/mountopts, incumbentAttrs) and the options Parse handles itself,
//     read from the source with go/ast, each of which must have an entry here (the
//     generator fails otherwise, naming it);
//   - what a value becomes, or why it is refused: the product code's own answers
//     (mountopts.Explain, credentials.Choose, classparams.Parse, webhook's Mutator.Review)
//     to the examples below;
//   - gcsfuse's options: mountopts.Options, the policy over gcsfuse's parameter table;
//   - chart values: values.schema.json (what each accepts), values.yaml (defaults, order
//     and the comment above each key).
//
// The short descriptions are this file's; everything else is computed.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is how the reference is written, as its header and the drift test name it.
const command = "go run ./hack/reference -o docs/reference.md"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reference", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the reference to this file instead of stdout")
	root := fs.String("root", ".", "the repository's root")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: go run ./hack/reference [-root DIR] [-o FILE]")
		return 2
	}
	doc, err := generate(*root)
	if err != nil {
		fmt.Fprintln(stderr, "reference:", err)
		return 1
	}
	if *out == "" {
		_, err = stdout.Write(doc)
	} else {
		err = os.WriteFile(*out, doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(stderr, "reference:", err)
		return 1
	}
	return 0
}

// generate returns docs/reference.md for the repository at root.
func generate(root string) ([]byte, error) {
	g := &gen{root: root}
	g.p("# Reference")
	g.p("")
	g.p("Every volume attribute, StorageClass parameter, pod annotation, mount option and chart value")
	g.p("the driver reads, and every metric family it serves. Generated from the code by `" + command + "`; do not edit.")
	g.p("`go test ./hack/reference` fails when this file differs from what the code says. Each")
	g.p("example's result is the code's own answer to it.")
	g.p("")
	g.p("- [Volume attributes](#volume-attributes)")
	g.p("- [StorageClass parameters](#storageclass-parameters)")
	g.p("- [Pod annotations](#pod-annotations)")
	g.p("- [Mount options](#mount-options)")
	g.p("- [Chart values](#chart-values)")
	g.p("- [Metrics](#metrics)")
	for _, section := range []func() error{g.attributes, g.classParams, g.annotations, g.mountOptions, g.chartValues, g.metrics} {
		if err := section(); err != nil {
			return nil, err
		}
	}
	return g.buf.Bytes(), nil
}

type gen struct {
	root string
	buf  bytes.Buffer
}

func (g *gen) p(line string) { g.buf.WriteString(line + "\n") }

// row writes one table row of cells that are Markdown already.
func (g *gen) row(cells ...string) { g.p("| " + strings.Join(cells, " | ") + " |") }

func (g *gen) header(cells ...string) {
	g.row(cells...)
	seps := make([]string, len(cells))
	for i := range seps {
		seps[i] = "---"
	}
	g.p("|" + strings.Join(seps, "|") + "|")
}
