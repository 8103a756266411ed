// The storage e2e binary: Kubernetes' storage testsuites through this driver's Go test driver
// (driver.go). A module of its own because it builds against k8s.io/kubernetes, whose go.mod
// replaces its staging modules with local paths: hack/conformance-build.sh copies these
// sources into the scratch module that maps each staging module to its published tag, and
// builds there. Nothing of the driver's own module imports it.
module gcsfuse-csi.local/storage-e2e

go 1.26.0
