// Command gcsfuse-csi-controller is a PLACEHOLDER for the dynamic provisioner, which is
// being written on another branch: it exists only so that the image table
// (hack/images/spec.go), the Dockerfile check and the builds of this branch have a package
// to build. It is replaced by the real command when the branches are merged.
package main

import (
	"fmt"
	"os"
)

// version is the image tag, set at build time (-X main.version).
var version = "dev"

func main() {
	fmt.Println("placeholder")
	fmt.Fprintf(os.Stderr, "gcsfuse-csi-controller %s: a placeholder, the provisioner is not merged yet\n", version)
	os.Exit(2)
}
