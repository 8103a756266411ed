// Package needs lets a test say what the machine must have for it to prove anything. A test
// that skips where CI can run it proves nothing while looking green, so with
// GCSFUSE_CSI_REQUIRE_INTEGRATION=1 (hack/test.sh sets it) a missing need fails the test
// instead of skipping it. It imports nothing of this repository, so any package's own tests
// can use it.
package needs

import (
	"os"
	"os/exec"
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

// EnvHelm names the variable that gives the helm binary. hack/test.sh sets it to the helm
// it builds at the pinned HELM_VERSION, so the chart is checked by the Helm that installs it.
const EnvHelm = "HELM"

// Helm returns the helm binary to run: $HELM, else helm on PATH. Without either it stops t:
// a skip, or a failure when Required, since the chart's checks would otherwise pass in CI
// without rendering anything.
func Helm(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvHelm); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", EnvHelm, p, err)
		}
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if Required() {
		t.Fatalf("this test needs helm ($%s or helm on PATH; hack/test.sh builds it), and %s=1 says it must run here", EnvHelm, EnvRequire)
	}
	t.Skipf("needs helm: set %s to a helm binary (hack/chart.sh builds the pinned one) or put helm on PATH", EnvHelm)
	return ""
}
