// Command gcsfuse-csi-node is the privileged CSI node plugin (a DaemonSet): it mounts pod
// volumes with a FUSE descriptor handed to the pod's sidecar, and watches the pods of its
// node to tell legacy sidecars when the workload is done. This is its flags and signals;
// pkg/nodeplugin builds and runs the parts.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodeplugin"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/runtimewatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
)

var version = "dev"

func main() {
	fusemount.RunProbeIfAsked() // the node plugin re-executes itself to statfs a possibly dead mount
	os.Exit(run())
}

// run parses the flags, builds the node plugin and serves it until SIGTERM or SIGINT: exit 2
// for a configuration it cannot run with, 1 when it fails on the node, 0 once stopped.
func run() int {
	c := nodeplugin.Config{Version: version}
	fs := flag.CommandLine
	fs.StringVar(&c.Endpoint, "endpoint", "unix:///csi/csi.sock", "CSI endpoint")
	fs.StringVar(&c.NodeID, "node-id", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&c.KubeletRoot, "kubelet-root", "/var/lib/kubelet", "kubelet root directory")
	fs.StringVar(&c.DriverName, "driver-name", contract.DriverName, "the CSI driver name to register: "+strings.Join(contract.DriverNames, " or ")+" (the GKE driver's, on a cluster that does not run it, so that volumes written for it need no edit); the CSIDriver object and the webhook must use the same")
	fs.StringVar(&c.StateDir, "state-dir", "", "where offers not yet taken by a sidecar are recorded, to offer them again after a restart (default <kubelet-root>/plugins/<driver-name>/offers; \"-\" disables)")
	fs.StringVar(&c.SharedDir, "shared-dir", "", "directory of the shared mount mode: the node mounter's hostPath and the shared FUSE mounts, e.g. <kubelet-root>/plugins/<driver-name>/shared (empty: no mounter runs, and volumes with "+contract.AttrMountMode+": "+contract.MountModeShared+" are refused)")
	fs.DurationVar(&c.SharedLinger, "shared-linger", sharedmount.DefaultLinger, "how long a shared mount outlives the last pod that used it, so that pods run one after another mount once")
	fs.StringVar(&c.SharedWIFProvider, "shared-wif-provider", "", "Workload Identity Federation provider for the shared volumes ("+contract.AttrMountMode+": "+contract.MountModeShared+") without a Secret or a provider of their own, when --wif-provider is empty: each pod's own token is exchanged there, instead of the mounter's Application Default Credentials (on GKE: identitynamespace:PROJECT.svc.id.goog:https://container.googleapis.com/v1/projects/PROJECT/locations/LOCATION/clusters/CLUSTER)")
	fs.StringVar(&c.SharedADCNamespaces, "shared-adc-namespaces", "", "comma separated namespaces whose shared volumes may read with the mounter's Application Default Credentials (\""+credentials.AllNamespaces+"\": all); the others' are refused (empty: none)")
	fs.StringVar(&c.GCSEndpoint, "gcs-endpoint", "", "GCS endpoint for every volume, e.g. an emulator's http://host:port/storage/v1/ (empty: Google Cloud Storage)")
	fs.StringVar(&c.WIFProvider, "wif-provider", "", "Workload Identity Federation provider for every volume without a Secret, the STS audience //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER (empty: Application Default Credentials, unless a volume sets "+contract.AttrWorkloadIdentityProvider+")")
	fs.StringVar(&c.WIFTokenAudience, "wif-token-audience", contract.TokenAudience, "audience of the kubelet's service account token to exchange: the CSIDriver's tokenRequests audience (the chart passes its tokenRequest.audience); empty: the CSIDriver has no tokenRequests, so no token comes and Workload Identity Federation is off")
	fs.StringVar(&c.WIFTokenURL, "wif-token-url", credentials.DefaultTokenURL, "STS token exchange endpoint")
	fs.StringVar(&c.WIFAllowedTokenURLs, "wif-allowed-token-urls", "", "comma separated further STS endpoints a volume may choose with the "+contract.AttrTokenURL+" attribute")
	fs.StringVar(&c.WIFServiceAccount, "wif-service-account", "", "Google service account the federated identity impersonates by default (empty: none; a volume may set "+contract.AttrServiceAccount+")")
	fs.StringVar(&c.IAMCredentialsURL, "iam-credentials-url", credentials.DefaultIAMCredentialsURL, "base URL of the IAM Credentials API (service account impersonation)")
	fs.StringVar(&c.KeyTokenURIs, "key-token-uris", credentials.DefaultKeyTokenURI, "comma separated token_uri values a service account key from a Secret may carry")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig (empty: in-cluster when running in a pod)")
	fs.BoolVar(&c.WatchPods, "watch-pods", true, "watch this node's pods to end legacy sidecars (needs API access)")
	fs.StringVar(&c.RuntimeEndpoint, "runtime-endpoint", nodeplugin.RuntimeAuto, "CRI endpoint of this node, e.g. unix:///run/containerd/containerd.sock: the node plugin learns from it the moment a pod's workload containers exit, and tells the sidecar at once (\""+nodeplugin.RuntimeAuto+"\": the first of "+strings.Join(containerexit.DefaultEndpoints, ", ")+" that exists; \"\": none, the API server alone, seconds later)")
	fs.StringVar(&c.RuntimeEvents, "runtime-events", string(runtimewatch.ModeAuto), "how container exits are learnt: auto (the CRI event stream on runtimes that give each reader every event, containerd >= 2; else a node-wide ListContainers every 100 ms), events, poll")
	fs.StringVar(&c.MachineType, "machine-type", nodeplugin.MachineTypeAuto, "machine type given to every gcsfuse (--machine-type), sparing it the GCE metadata lookups it makes at each start: \""+nodeplugin.MachineTypeAuto+"\" (this Node's node.kubernetes.io/instance-type label, or \"unknown\" without one), \""+nodeplugin.MachineTypeLookup+"\" (gcsfuse asks the metadata server), or an instance type; a volume's mountOptions may set its own")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address (empty: off)")
	fs.DurationVar(&c.PodSyncTimeout, "pod-sync-timeout", podwatch.DefaultSyncTimeout, "warn when this node's pods cannot be listed within this time (the node plugin keeps serving CSI calls and retrying)")
	verbose := fs.Bool("v", false, "debug logging")
	fs.StringVar(&c.RegistrationSocket, "registration-socket", "", "serve the kubelet plugin registration API on this socket, e.g. /var/lib/kubelet/plugins_registry/<driver-name>-reg.sock (empty: off, an external registrar registers the driver)")
	fs.StringVar(&c.HTTPSProxy, "https-proxy", "", "proxy every volume's gcsfuse sends its https:// requests through (its HTTPS_PROXY: storage, token exchanges), e.g. http://proxy.corp:3128 (empty: none; the user and password a URL may carry are never logged)")
	fs.StringVar(&c.HTTPProxy, "http-proxy", "", "proxy for gcsfuse's http:// requests (its HTTP_PROXY; an http:// emulator endpoint)")
	fs.StringVar(&c.NoProxy, "no-proxy", "", "hosts gcsfuse reaches without the proxy (its NO_PROXY: comma separated names, .domains, IPs, CIDRs; localhost and loopback IPs never go through a proxy)")
	fs.StringVar(&c.CABundleFile, "ca-bundle-file", "", "PEM file of CA certificates every volume's gcsfuse trusts besides the system's roots (a private CA of the storage endpoint or of a TLS-inspecting proxy); read at start")
	fs.StringVar(&c.KubeletCSIEndpoint, "kubelet-csi-endpoint", "", "the CSI socket path as the kubelet sees it on the host (for --registration-socket; default <kubelet-root>/plugins/<driver-name>/csi.sock)")
	flag.Parse()

	lvl := slog.LevelInfo
	if *verbose {
		lvl = slog.LevelDebug
	}
	c.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	slog.SetDefault(c.Log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	p, err := nodeplugin.New(c)
	if err != nil {
		c.Log.Error("cannot start", "err", err)
		if errors.Is(err, nodeplugin.ErrInvalidConfig) {
			return 2
		}
		return 1
	}
	if err := p.Run(ctx); err != nil {
		c.Log.Error("stopped", "err", err)
		return 1
	}
	return 0
}
