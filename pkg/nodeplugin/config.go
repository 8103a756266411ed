// Package nodeplugin is the node plugin's composition root: from one Config, New builds the
// parts (the CSI node service over its mounters, the exit coordinator, the pod watch, the
// runtime watch, the kubelet registrar, the metrics) and wires them; Run serves them until
// its context ends or a critical part fails, then stops them in order. cmd/gcsfuse-csi-node
// is only its flags and signals.
package nodeplugin

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// RuntimeAuto is the Config.RuntimeEndpoint that looks for the runtime's usual sockets.
const RuntimeAuto = "auto"

// ErrInvalidConfig wraps every error New returns for a configuration it cannot run with (the
// command exits 2 on it), as opposed to a failure of the node it runs on (exit 1).
var ErrInvalidConfig = errors.New("invalid configuration")

// Config is everything the node plugin is told; cmd/gcsfuse-csi-node's flags fill it, and
// each field's flag says what it means.
type Config struct {
	Endpoint           string // --endpoint: the CSI socket, unix:///csi/csi.sock
	NodeID             string // --node-id: this node's name (required)
	KubeletRoot        string // --kubelet-root
	DriverName         string // --driver-name (contract.ValidateDriverName)
	StateDir           string // --state-dir ("": the default, "-": none)
	KubeletCSIEndpoint string // --kubelet-csi-endpoint ("": <kubelet-root>/plugins/<driver>/csi.sock)
	RegistrationSocket string // --registration-socket ("": an external registrar)
	Version            string // reported by the Identity service

	SharedDir           string        // --shared-dir ("": shared volumes refused)
	SharedLinger        time.Duration // --shared-linger
	SharedWIFProvider   string        // --shared-wif-provider
	SharedADCNamespaces string        // --shared-adc-namespaces

	GCSEndpoint         string // --gcs-endpoint
	WIFProvider         string // --wif-provider
	WIFTokenAudience    string // --wif-token-audience ("": no token, no federation)
	WIFTokenURL         string // --wif-token-url
	WIFAllowedTokenURLs string // --wif-allowed-token-urls, comma separated
	WIFServiceAccount   string // --wif-service-account
	IAMCredentialsURL   string // --iam-credentials-url
	KeyTokenURIs        string // --key-token-uris, comma separated

	Kubeconfig      string        // --kubeconfig ("": in-cluster)
	WatchPods       bool          // --watch-pods
	PodSyncTimeout  time.Duration // --pod-sync-timeout
	RuntimeEndpoint string        // --runtime-endpoint (RuntimeAuto, "" for none)
	RuntimeEvents   string        // --runtime-events (runtimewatch.ParseMode)
	MachineType     string        // --machine-type (MachineTypeAuto, MachineTypeLookup or a type)
	MetricsAddr     string        // --metrics-addr ("": off)

	HTTPSProxy, HTTPProxy, NoProxy string // --https-proxy, --http-proxy, --no-proxy
	CABundleFile                   string // --ca-bundle-file

	Log *slog.Logger // required
}

// validate checks what needs no I/O and fills the defaults that depend on other fields.
func (c *Config) validate() error {
	switch {
	case c.Log == nil:
		return fmt.Errorf("%w: no logger", ErrInvalidConfig)
	case c.NodeID == "":
		return fmt.Errorf("%w: --node-id (or $NODE_NAME) is required", ErrInvalidConfig)
	case c.Endpoint == "" || c.KubeletRoot == "":
		return fmt.Errorf("%w: --endpoint and --kubelet-root are required", ErrInvalidConfig)
	}
	if err := contract.ValidateDriverName(c.DriverName); err != nil {
		return fmt.Errorf("%w: --driver-name: %w", ErrInvalidConfig, err)
	}
	if c.KubeletCSIEndpoint == "" {
		c.KubeletCSIEndpoint = filepath.Join(c.KubeletRoot, "plugins", c.DriverName, "csi.sock")
	}
	return nil
}

// offerDir is where offers are recorded: StateDir, its default, or none for "-".
func (c *Config) offerDir() string {
	switch c.StateDir {
	case "-":
		return ""
	case "":
		return filepath.Join(c.KubeletRoot, "plugins", c.DriverName, "offers")
	}
	return c.StateDir
}

// credentials is what the node service builds each volume's credentials from. Without a
// token audience the kubelet passes the pod no service account token for the driver
// (CSIDriver tokenRequests is empty), so none is expected.
func (c *Config) credentials() credentials.Config {
	return credentials.Config{
		Provider: c.WIFProvider, SharedProvider: c.SharedWIFProvider, TokenAudience: c.WIFTokenAudience,
		NoServiceAccountToken: c.WIFTokenAudience == "", TokenURL: c.WIFTokenURL,
		AllowedTokenURLs: mountopts.Split(c.WIFAllowedTokenURLs), ServiceAccount: c.WIFServiceAccount,
		IAMCredentialsURL: c.IAMCredentialsURL, KeyTokenURIs: mountopts.Split(c.KeyTokenURIs),
	}
}
