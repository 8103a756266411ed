// Package needs lets a test say what the machine must have for it to prove anything. A test
// that skips where CI can run it proves nothing while looking green, so with
// GCSFUSE_CSI_REQUIRE_INTEGRATION=1 (hack/test.sh sets it) a missing need fails the test
// instead of skipping it. It imports nothing of this repository, so any package's own tests
// can use it.
package needs

import (
	"os"
	"testing"
)

// EnvRequire names the variable that turns a missing need into a failure.
const EnvRequire = "GCSFUSE_CSI_REQUIRE_INTEGRATION"

// Required reports whether missing needs fail tests rather than skip them.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// RootAndFUSE stops t unless it runs as root with /dev/fuse: a skip, or a failure when
// Required.
func RootAndFUSE(t testing.TB) {
	t.Helper()
	missing := ""
	switch _, err := os.Stat("/dev/fuse"); {
	case os.Geteuid() != 0:
		missing = "root"
	case err != nil:
		missing = "/dev/fuse"
	}
	if missing == "" {
		return
	}
	if Required() {
		t.Fatalf("this test needs %s, and %s=1 says it must run here", missing, EnvRequire)
	}
	t.Skipf("needs %s", missing)
}

// Root stops t unless it runs as root (chown, mounts): a skip, or a failure when Required.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if Required() {
		t.Fatalf("this test needs root, and %s=1 says it must run here", EnvRequire)
	}
	t.Skip("needs root")
}
