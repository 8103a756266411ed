// Package integration runs the node plugin, the real sidecar binary and the real gcsfuse
// against the GCS emulator with real /dev/fuse mounts. It needs root; without it the tests
// skip, unless GCSFUSE_CSI_REQUIRE_INTEGRATION=1 (CI) makes that a failure.
package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

var (
	sidecarBin string
	emu        *emulator.Server
)

func TestMain(m *testing.M) {
	if limit, ok := os.LookupEnv(envUserNSHolder); ok { // this binary re-executed by startUserNS
		os.Exit(userNSHolder(limit))
	}
	if miss := testenv.Prereqs(); miss != "" {
		if needs.Required() {
			fmt.Fprintln(os.Stderr, "integration tests required but this machine lacks:", miss)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "skipping integration tests; missing:", miss)
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "gcsfuse-csi-bin-")
	if err != nil {
		panic(err)
	}
	_ = os.Chmod(dir, 0o755)
	sidecarBin = filepath.Join(dir, "gcsfuse-sidecar")
	if err := testenv.BuildSidecar(sidecarBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	emu, err = emulator.Start("127.0.0.1", 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	emu.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newEnv returns an environment sharing the package's emulator and sidecar binary, with the
// buckets created, closed at the end of the test.
func newEnv(t *testing.T, buckets ...string) *testenv.Env {
	t.Helper()
	for _, b := range buckets {
		emu.CreateBucketWithOpts(fakestorageBucket(b))
	}
	e, err := testenv.New(testenv.Options{Emulator: emu, SidecarBin: sidecarBin, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}
