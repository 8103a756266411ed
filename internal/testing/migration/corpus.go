// Package migration is the migration corpus: manifests written from the GKE Cloud Storage
// FUSE CSI driver's documentation and examples (each file says which), covering every
// attribute, mount option form and annotation docs/migration.md lists at least once. Each
// either runs on this driver with only the driver's install changed (installed under the
// GKE driver's name), or is refused, at admission or at mount, with a reason.
//
// The first line of each file is its expectation, which the tests read:
//
//	# expect: runs
//	# expect: refused: <a part of the driver's reason>
//
// pkg/audit's TestCorpus checks that `kubectl gcsfuse audit` says the same of every file,
// and e2e's TestIncumbentDriverName applies every file on the local cluster and checks
// that it runs (its objects reach the bucket) or is refused with that reason. The files
// use placeholders that a run substitutes (Substitute): bucket names and images.
package migration

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

// The placeholders of the corpus.
const (
	// Bucket and Bucket2 are bucket names (Bucket2 for a second bucket).
	Bucket  = "BUCKET"
	Bucket2 = "BUCKET2"
	// WorkloadImage is the e2e workload image (test/e2e/workload): each container's args
	// are its commands ("write -dir /data -name x.bin -bytes 1024").
	WorkloadImage = "WORKLOAD_IMAGE"
	// SidecarImage is this driver's sidecar image, lent by a gke-gcsfuse-sidecar container.
	SidecarImage = "SIDECAR_IMAGE"
)

// placeholder matches a placeholder as a whole word (BUCKET in "BUCKET:data", not in
// "BUCKET2").
var placeholder = regexp.MustCompile(`\b(` + Bucket2 + `|` + Bucket + `|` + WorkloadImage + `|` + SidecarImage + `)\b`)

//go:embed *.yaml
var files embed.FS

// File is one manifest of the corpus.
type File struct {
	// Name is its file name ("01-inline-pod.yaml").
	Name string
	// Text is its content, placeholders unsubstituted.
	Text   string
	Expect Expectation
}

// Expectation is what a file's first line says the driver does with it.
type Expectation struct {
	// Refused: something in it is refused; Reason is a part of the reason.
	Refused bool
	Reason  string
}

// expectLine is a file's first line.
var expectLine = regexp.MustCompile(`^# expect: (runs|refused: (\S.*))$`)

// Files returns the corpus in file name order, or an error naming a file without a valid
// expectation line.
func Files() ([]File, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	var out []File
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		first, _, _ := strings.Cut(string(b), "\n")
		m := expectLine.FindStringSubmatch(strings.TrimRight(first, "\r"))
		if m == nil {
			return nil, fmt.Errorf("%s: the first line is %q, want \"# expect: runs\" or \"# expect: refused: <reason>\"", n, first)
		}
		out = append(out, File{Name: n, Text: string(b), Expect: Expectation{Refused: m[2] != "", Reason: m[2]}})
	}
	return out, nil
}

// Uses reports whether the file uses a placeholder.
func (f File) Uses(name string) bool {
	for _, m := range placeholder.FindAllString(f.Text, -1) {
		if m == name {
			return true
		}
	}
	return false
}

// Substitute returns the file with each placeholder replaced by its value in values; a
// placeholder without a value is left as it is.
func (f File) Substitute(values map[string]string) []byte {
	return []byte(placeholder.ReplaceAllStringFunc(f.Text, func(p string) string {
		if v, ok := values[p]; ok {
			return v
		}
		return p
	}))
}
