package storagee2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	storageframework "k8s.io/kubernetes/test/e2e/storage/framework"
	"k8s.io/kubernetes/test/e2e/storage/testsuites"
	"k8s.io/kubernetes/test/e2e/storage/utils"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// The framework's debug and metrics hooks, as the Kubernetes e2e suite loads them.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
)

var emulator = flag.String("gcsfuse.emulator", "", "the GCS emulator's base URL as this host reaches it (http://NODE_IP:PORT)")

// The suites: every CSI testsuite of this Kubernetes version, defined for this driver;
// SkipUnsupportedTest and the capabilities decide which of their patterns run.
var _ = utils.SIGDescribe("gcsfuse-csi Go test driver", func() {
	d, err := NewDriver(emulatorURLFromFlags())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	args := storageframework.GetDriverNameWithFeatureTags(d)
	args = append(args, func() { storageframework.DefineTestSuites(d, testsuites.CSISuites) })
	framework.Context(args...)
})

// emulatorURLFromFlags reads -gcsfuse.emulator. The Describe body above runs when ginkgo
// builds the tree, in RunSpecs, after TestMain parsed the flags.
func emulatorURLFromFlags() string { return *emulator }

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if *emulator == "" {
		fmt.Fprintln(os.Stderr, "-gcsfuse.emulator is required: the GCS emulator's URL as this host reaches it")
		os.Exit(2)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestStorage(t *testing.T) {
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "gcsfuse-csi storage suites", suiteConfig, reporterConfig)
}
