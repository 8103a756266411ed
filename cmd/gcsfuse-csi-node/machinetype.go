package main

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
)

// Values of --machine-type besides an explicit instance type.
const (
	// machineTypeAuto: the Node's instance-type label (csidriver.MachineTypeUnknown when
	// it has none).
	machineTypeAuto = "auto"
	// machineTypeLookup: pass nothing, gcsfuse asks the GCE metadata server (a GCE node
	// without a cloud provider's labels that wants gcsfuse's machine-specific tuning).
	machineTypeLookup = "lookup"
)

// nodeGetTimeout bounds the one read of this node's Node object at start.
const nodeGetTimeout = 10 * time.Second

// instanceTypeLabels are where clouds record a Node's machine type, newest first.
var instanceTypeLabels = []string{corev1.LabelInstanceTypeStable, corev1.LabelInstanceType}

// resolveMachineType turns the --machine-type flag into csidriver.Config.MachineType. nodes
// is nil without API access; "auto" then falls back to letting gcsfuse look it up.
func resolveMachineType(ctx context.Context, flagValue string, nodes corev1client.NodeInterface, nodeName string, log *slog.Logger) string {
	switch flagValue {
	case machineTypeLookup:
		return ""
	case machineTypeAuto:
	default:
		return flagValue
	}
	if nodes == nil {
		log.Warn("--machine-type=auto without API access: gcsfuse looks the machine type up itself at each start (up to ~200 ms where the GCE metadata server does not answer)")
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, nodeGetTimeout)
	defer cancel()
	node, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		log.Warn("cannot read this node's instance type; gcsfuse looks the machine type up itself at each start", "node", nodeName, "err", err)
		return ""
	}
	for _, l := range instanceTypeLabels {
		if v := node.Labels[l]; v != "" {
			log.Info("gcsfuse machine type from the node's label", "label", l, "machineType", v)
			return v
		}
	}
	log.Info("the node has no instance-type label: gcsfuse is told the machine type is unknown and skips its metadata lookups (--machine-type=lookup restores them)", "machineType", csidriver.MachineTypeUnknown)
	return csidriver.MachineTypeUnknown
}
