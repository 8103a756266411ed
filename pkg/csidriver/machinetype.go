package csidriver

import (
	"fmt"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// Machine types, and why the node plugin passes one.
//
// gcsfuse tunes a few defaults for some GCE machine types, which it learns by asking the GCE
// metadata server for the instance's machine type, twice per start (before the mount, and
// again once it knows the bucket), each time up to two attempts of 50 ms. Where that server
// does not answer at once (a pod whose DNS does not resolve metadata.google.internal
// quickly: any cluster outside GCE, most pod networks), every volume's start waits for the
// timeouts: ~200 ms measured on the local cluster, before the app may start. The node
// plugin knows the node's instance type from its Node object and passes it, so gcsfuse
// skips the lookups and tunes exactly as it would have.

// MachineTypeUnknown is passed when the node has no instance type (no cloud provider sets
// the label): gcsfuse then skips the lookup and applies no machine-specific tuning, which
// is what a failed lookup gives too.
const MachineTypeUnknown = "unknown"

// SetMachineType sets the machine type given to gcsfuse from the next publish on: the node
// plugin learns it from its Node object, which may take a while when the API server is
// away, and mounts are not held up for it. A republish of a volume published before still
// matches it.
func (s *NodeServer) SetMachineType(mt string) error {
	if mt != "" {
		if _, err := mountopts.Parse([]string{"machine-type=" + mt}); err != nil {
			return fmt.Errorf("machine type: %w", err)
		}
	}
	s.machineType.Store(&mt)
	return nil
}
