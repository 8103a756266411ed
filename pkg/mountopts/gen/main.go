// Command gen writes pkg/mountopts/gcsfuse_params.go, the table of gcsfuse's parameters at
// the version hack/lib.sh pins, from the module's own cfg/params.yaml. Run it with
// `go generate ./pkg/mountopts` (or `go run ./pkg/mountopts/gen` from the repository root)
// after changing GCSFUSE_VERSION; TestGCSFuseParamsUpToDate fails until then.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts/internal/paramsgen"
)

func main() {
	out := flag.String("o", "", "output file (default: pkg/mountopts/gcsfuse_params.go under the repository root)")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := paramsgen.RepoRoot(wd)
	if err != nil {
		return err
	}
	lib, err := os.ReadFile(filepath.Join(root, "hack", "lib.sh"))
	if err != nil {
		return err
	}
	version, err := paramsgen.PinnedVersion(lib)
	if err != nil {
		return err
	}
	yml, source, err := paramsgen.FetchParams(version)
	if err != nil {
		return err
	}
	src, err := paramsgen.Generate(yml, version)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	if out == "" {
		out = filepath.Join(root, "pkg", "mountopts", "gcsfuse_params.go")
	}
	return os.WriteFile(out, src, 0o644)
}
