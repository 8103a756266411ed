package nodeplugin

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/backoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
)

// Values of --machine-type besides an explicit instance type.
const (
	// MachineTypeAuto: the Node's instance-type label (csidriver.MachineTypeUnknown when
	// it has none), learnt in the background; until then gcsfuse looks it up itself.
	MachineTypeAuto = "auto"
	// MachineTypeLookup: pass nothing, gcsfuse asks the GCE metadata server (a GCE node
	// without a cloud provider's labels that wants gcsfuse's machine-specific tuning).
	MachineTypeLookup = "lookup"
)

// Reading this node's Node object: each attempt's bound, and the pacing of the retries
// while the API server does not answer (the node plugin serves meanwhile).
const (
	nodeGetTimeout   = 10 * time.Second
	nodeRetryFirst   = time.Second
	nodeRetryMax     = time.Minute
	nodeWarnEveryNth = 5
)

// instanceTypeLabels are where clouds record a Node's machine type, newest first.
var instanceTypeLabels = []string{corev1.LabelInstanceTypeStable, corev1.LabelInstanceType}

// initialMachineType turns the --machine-type flag into csidriver.Config.MachineType, and
// says whether the Node must be read for it (learnMachineType). Without API access "auto"
// leaves the lookup to gcsfuse.
func initialMachineType(flagValue string, haveAPI bool, log *slog.Logger) (mt string, fromNode bool) {
	switch flagValue {
	case MachineTypeLookup:
		return "", false
	case MachineTypeAuto:
		if !haveAPI {
			log.Warn("--machine-type=auto without API access: gcsfuse looks the machine type up itself at each start (up to ~200 ms where the GCE metadata server does not answer)")
		}
		return "", haveAPI
	default:
		return flagValue, false
	}
}

// machineTypeFromNode reads the Node's instance type once: its label, or
// csidriver.MachineTypeUnknown when it has none.
func machineTypeFromNode(ctx context.Context, nodes corev1client.NodeInterface, nodeName string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, nodeGetTimeout)
	defer cancel()
	node, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading node %s: %w", nodeName, err)
	}
	for _, l := range instanceTypeLabels {
		if v := node.Labels[l]; v != "" {
			return v, nil
		}
	}
	return csidriver.MachineTypeUnknown, nil
}

// learnMachineType reads the Node until it answers (retrying with backoff; the node plugin
// serves meanwhile and gcsfuse looks the machine type up itself), then sets the machine
// type. It returns when done or when ctx ends.
func learnMachineType(ctx context.Context, nodes corev1client.NodeInterface, nodeName string, set func(string) error, log *slog.Logger) {
	b := backoff.Doubling(nodeRetryFirst, nodeRetryMax)
	for attempt := 1; ; attempt++ {
		mt, err := machineTypeFromNode(ctx, nodes, nodeName)
		if err == nil {
			if err := set(mt); err != nil {
				log.Error("the node's instance type is not a machine type gcsfuse takes; gcsfuse looks it up itself", "machineType", mt, "err", err)
				return
			}
			if mt == csidriver.MachineTypeUnknown {
				log.Info("the node has no instance-type label: gcsfuse is told the machine type is unknown and skips its metadata lookups (--machine-type=lookup restores them)", "machineType", mt)
			} else {
				log.Info("gcsfuse machine type from the node's label", "machineType", mt)
			}
			return
		}
		if attempt == 1 || attempt%nodeWarnEveryNth == 0 {
			log.Warn("cannot read this node's instance type yet; gcsfuse looks the machine type up itself until then", "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(b.Step()):
		}
	}
}
