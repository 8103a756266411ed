package mountopts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts/internal/paramsgen"
)

// The checked-in table must be what the generator makes from the params.yaml of the gcsfuse
// hack/lib.sh pins: a version bump without `go generate ./pkg/mountopts`, or a hand edit of
// gcsfuse_params.go, would make the driver judge options against another gcsfuse than the
// one it runs. It fetches the module through the module proxy (or the module cache) and
// fails, never skips, when it cannot: a check that silently stops running checks nothing.
func TestGCSFuseParamsUpToDate(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := paramsgen.RepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	lib, err := os.ReadFile(filepath.Join(root, "hack", "lib.sh"))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := paramsgen.PinnedVersion(lib)
	if err != nil {
		t.Fatal(err)
	}
	if pinned != GCSFuseVersion {
		t.Fatalf("hack/lib.sh pins gcsfuse %s but gcsfuse_params.go describes %s: run go generate ./pkg/mountopts", pinned, GCSFuseVersion)
	}
	yml, source, err := paramsgen.FetchParams(pinned)
	if err != nil {
		t.Fatalf("cannot fetch gcsfuse %s's params.yaml to check gcsfuse_params.go against (needs the Go module proxy or a module cache holding it): %v", pinned, err)
	}
	want, err := paramsgen.Generate(yml, pinned)
	if err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	got, err := os.ReadFile("gcsfuse_params.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("gcsfuse_params.go differs from %s at line %d:\n have %q\n want %q\nrun go generate ./pkg/mountopts", source, i+1, g, w)
			}
		}
	}
}

func TestPinnedVersion(t *testing.T) {
	for in, want := range map[string]string{
		"set -e\nGCSFUSE_VERSION=3.13.0\nGCSFUSE_TOOLCHAIN=go1.27.2\n": "3.13.0",
		"GCSFUSE_VERSION=3.13.0":                         "3.13.0",
		"# GCSFUSE_VERSION=1.0.0\nX=1\n":                 "",
		"GCSFUSE_VERSION=3.1\n":                          "",
		"GCSFUSE_VERSION=1.0.0\nGCSFUSE_VERSION=2.0.0\n": "",
	} {
		got, err := paramsgen.PinnedVersion([]byte(in))
		if got != want || (err == nil) != (want != "") {
			t.Errorf("PinnedVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// The config form "section:key:value" is resolved by finding the one split point whose left
// side is a config path; that is unambiguous only while no config path is a prefix of another.
func TestConfigPathsArePrefixFree(t *testing.T) {
	paths := map[string]bool{}
	for _, p := range gcsfuseParams {
		if p.ConfigPath != "" {
			paths[p.ConfigPath] = true
		}
	}
	for p := range paths {
		for i := range p {
			if p[i] == '.' && paths[p[:i]] {
				t.Errorf("config path %q is a prefix of %q", p[:i], p)
			}
		}
	}
}

// A module that cannot be fetched is an error that says which, not an empty table.
func TestFetchParamsFailsLoudly(t *testing.T) {
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
	_, _, err := paramsgen.FetchParams("0.0.1")
	if err == nil || !strings.Contains(err.Error(), paramsgen.Module+"@v0.0.1") {
		t.Fatalf("FetchParams of a version that cannot be fetched: err = %v, want one naming the module", err)
	}
}
