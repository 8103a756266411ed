// Command gcsfuse-webhook is the mutating admission webhook that injects the gcsfuse sidecar
// into the pods that opt in with the gcsfuse.csi.storage/volumes annotation. See package
// pkg/webhook for what it injects and why.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"golang.org/x/time/rate"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/webhook"
)

// discoveryTimeout bounds the API server version lookup, which runs on the admission path
// when the cached version expires; it must stay well under the webhook's own timeout.
const discoveryTimeout = 5 * time.Second

type options struct {
	listen          string
	certFile        string
	keyFile         string
	kubeconfig      string
	versionRefresh  time.Duration
	shutdownTimeout time.Duration
	shutdownDelay   time.Duration
	logLevel        slog.Level
	apiQPS          float64
	apiBurst        int
	// credentialConfigMaps: read the credential ConfigMaps pods name (RBAC: get on
	// configmaps); off, such pods are refused.
	credentialConfigMaps bool
	config               webhook.Config
}

// defaultAPIQPS and defaultAPIBurst bound the webhook's own requests to the API server: its
// admission path's reads (a pod's claims, their volumes and classes). client-go's defaults
// (5 a second, bursts of 10) made every admission of a pod with a claim wait 200 ms per GET
// once 10 had been made: 400 ms a pod from 2.5 pods a second (hack/admission.sh); 50 a second
// still added 35 ms at the 90th percentile to a burst of ~140 pods with claims a second. A
// bound stays (0: none, the API server's priority and fairness alone), above what bursts of
// pods need within an admission's look-up timeout (3 s: 2,500 reads, a claim and its
// class for each of 1,000 pods per replica): past it a pod of the driver would be admitted
// without its sidecar. One pod cannot spend it alone: it is read for at most
// webhook.MaxLookups claims and classes.
const (
	defaultAPIQPS   = 500
	defaultAPIBurst = 1000
)

// resourceFlag names the request and limit flags of one resource.
type resourceFlag struct {
	name       corev1.ResourceName
	flag       string
	defRequest string
	defLimit   string
}

// resourceFlags hold the sidecar's default resources, derived from `go run ./test/bench -only rss`
// (docs/performance.md, "Sidecar resources"): per volume, gcsfuse idles at ~40 MiB, peaks at ~111 MiB during
// a streaming write and ~86 MiB reading through the file cache; the sidecar itself ~13 MiB. CPU:
// ~0 idle, ~0.1 core writing, ~0.75 core reading from the file cache (no limit: bursts use
// what is free). The memory request covers one volume streaming (13 + 111 MiB); the limit
// covers three volumes at gcsfuse's worst streaming-write case (write-global-max-blocks 4 x 32
// MiB blocks, ~325 MiB each), and stops a runaway gcsfuse from taking the node.
var resourceFlags = []resourceFlag{
	{corev1.ResourceCPU, "cpu", "100m", ""},
	{corev1.ResourceMemory, "memory", "128Mi", "1Gi"},
	{corev1.ResourceEphemeralStorage, "ephemeral-storage", "5Gi", ""},
}

// parseFlags parses the command line into options; every value is checked here so that a
// misconfigured deployment fails at startup, not at the first admission.
func parseFlags(args []string, output io.Writer) (options, error) {
	fs := flag.NewFlagSet("gcsfuse-webhook", flag.ContinueOnError)
	fs.SetOutput(output)
	var o options
	fs.StringVar(&o.listen, "listen", ":9443", "HTTPS listen address")
	fs.StringVar(&o.certFile, "tls-cert-file", "", "PEM serving certificate (required)")
	fs.StringVar(&o.keyFile, "tls-key-file", "", "PEM serving key (required)")
	fs.StringVar(&o.config.SidecarImage, "sidecar-image", "", "image of the injected gcsfuse sidecar (required)")
	fs.StringVar(&o.config.DriverName, "driver-name", contract.DriverName, "the CSI driver name the driver is installed under ("+strings.Join(contract.DriverNames, " or ")+"): inline volumes and PersistentVolumes of this driver, and claims and generic ephemeral volumes of a StorageClass it provisions, get the sidecar")
	pullSecrets := fs.String("sidecar-image-pull-secrets", "", "comma-separated Secret names added to injected pods' imagePullSecrets (a private registry for --sidecar-image)")
	sharedADC := fs.String("shared-adc-namespaces", "", "comma separated namespaces (or prefixes ending in *, or * alone) whose shared volumes ("+contract.AttrMountMode+": "+contract.MountModeShared+") may read with the node's mounter's Application Default Credentials: the node plugin's --shared-adc-namespaces; elsewhere a pod with such an inline volume is denied (empty: none)")
	fs.BoolVar(&o.credentialConfigMaps, "credential-configmaps", true, "read the credential ConfigMap a pod names ("+contract.AnnotationCredentialConfigMap+", or the GKE driver's gke-gcsfuse/ name), checked and given to its sidecar; false: such pods are refused (the webhook then needs no RBAC on configmaps)")
	credTokenURLs := fs.String("credential-token-urls", "", "comma-separated STS token endpoints a credential ConfigMap may name besides Google's https://sts.googleapis.com/v1/token (an STS of the cluster's own)")
	fs.BoolVar(&o.config.NodeFederated, "node-federated", false, "the node plugin federates every volume without an identity of its own (it has --wif-provider): a hostNetwork pod asking for its own account (hostNetworkPodKSA) is not refused as one that would read as the node")
	fs.BoolVar(&o.config.SharedFederated, "shared-federated", false, "the node plugin federates every shared volume without an identity of its own (it has --wif-provider or --shared-wif-provider), so none reads with the mounter's Application Default Credentials")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster configuration when empty")
	fs.DurationVar(&o.versionRefresh, "version-refresh-interval", 10*time.Minute, "how long the API server version is cached")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 20*time.Second, "how long in-flight admissions may take after SIGTERM")
	fs.DurationVar(&o.shutdownDelay, "shutdown-delay", webhook.DefaultShutdownDelay, "how long the webhook keeps serving, not ready, after SIGTERM, while the Service stops routing to it (0: none)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.Float64Var(&o.apiQPS, "kube-api-qps", defaultAPIQPS, "requests per second to the API server this replica may make (its claim, volume and class reads on the admission path), sustained; 0: no bound of its own (the API server's priority and fairness bounds them)")
	fs.IntVar(&o.apiBurst, "kube-api-burst", defaultAPIBurst, "requests to the API server this replica may make at once, above --kube-api-qps (with --kube-api-qps > 0)")
	requests := map[corev1.ResourceName]*string{}
	limits := map[corev1.ResourceName]*string{}
	for _, rf := range resourceFlags {
		requests[rf.name] = fs.String("sidecar-"+rf.flag+"-request", rf.defRequest,
			fmt.Sprintf("default %s request of the sidecar; empty or 0 for none", rf.name))
		limits[rf.name] = fs.String("sidecar-"+rf.flag+"-limit", rf.defLimit,
			fmt.Sprintf("default %s limit of the sidecar; empty or 0 for none", rf.name))
	}
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var missing []string
	for name, v := range map[string]string{"--tls-cert-file": o.certFile, "--tls-key-file": o.keyFile, "--sidecar-image": o.config.SidecarImage} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return options{}, fmt.Errorf("missing required flags: %s", strings.Join(missing, ", "))
	}
	if err := contract.ValidateDriverName(o.config.DriverName); err != nil {
		return options{}, fmt.Errorf("--driver-name: %w", err)
	}
	o.config.SidecarPullSecrets = mountopts.Split(*pullSecrets)
	o.config.CredentialTokenURLs = mountopts.Split(*credTokenURLs)
	for _, u := range o.config.CredentialTokenURLs {
		if err := credentials.CheckTokenURL(u); err != nil {
			return options{}, fmt.Errorf("--credential-token-urls: %w", err)
		}
	}
	adc, err := credentials.ParseSharedADC(*sharedADC)
	if err != nil {
		return options{}, fmt.Errorf("--shared-adc-namespaces: %w", err)
	}
	o.config.SharedADC = adc
	if err := o.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return options{}, fmt.Errorf("--log-level=%q: %w", *logLevel, err)
	}
	if o.versionRefresh <= 0 || o.shutdownTimeout <= 0 {
		return options{}, errors.New("--version-refresh-interval and --shutdown-timeout must be positive")
	}
	if o.apiQPS < 0 || o.apiBurst < 1 {
		return options{}, fmt.Errorf("--kube-api-qps (%v) must not be negative and --kube-api-burst (%d) must be positive", o.apiQPS, o.apiBurst)
	}
	if o.shutdownDelay < 0 {
		return options{}, errors.New("--shutdown-delay must not be negative")
	}
	if o.config.Resources.Requests, err = quantities(requests, "request"); err != nil {
		return options{}, err
	}
	if o.config.Resources.Limits, err = quantities(limits, "limit"); err != nil {
		return options{}, err
	}
	if err := o.config.Resources.Validate(); err != nil {
		return options{}, fmt.Errorf("sidecar resource flags: %w", err)
	}
	return o, nil
}

// quantities parses the flag values; empty and zero values mean "not set".
func quantities(values map[corev1.ResourceName]*string, kind string) (corev1.ResourceList, error) {
	list := corev1.ResourceList{}
	for _, rf := range resourceFlags {
		v := *values[rf.name]
		if v == "" {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("--sidecar-%s-%s=%q: %w", rf.flag, kind, v, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("--sidecar-%s-%s=%q: must not be negative", rf.flag, kind, v)
		}
		if !q.IsZero() {
			list[rf.name] = q
		}
	}
	return list, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (use --kubeconfig outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// apiLimits sets cfg's client-side bound on requests: none when qps is 0.
func apiLimits(cfg *rest.Config, qps float64, burst int) {
	cfg.QPS, cfg.Burst = float32(qps), burst
	if qps == 0 {
		cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	}
}

// run wires the webhook and serves until SIGTERM or SIGINT. The informers (nodes, quotas
// and LimitRanges, PersistentVolumes) are stopped and waited for before run returns, so
// nothing outlives it.
func run(ctx context.Context, o options, log *slog.Logger) error {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg = rest.AddUserAgent(cfg, "gcsfuse-webhook")
	apiLimits(cfg, o.apiQPS, o.apiBurst)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	// A separate client with a timeout: the watches of client must not have one.
	discoCfg := rest.CopyConfig(cfg)
	discoCfg.Timeout = discoveryTimeout
	disco, err := discovery.NewDiscoveryClientForConfig(discoCfg)
	if err != nil {
		return fmt.Errorf("creating the discovery client: %w", err)
	}

	versions := webhook.NewKubeClusterVersions(client, disco, o.versionRefresh, log)
	prebound := webhook.NewPreboundVolumes(client)
	o.config.Claims = webhook.KubeVolumeClaims{Client: client, Prebound: prebound, Live: rate.NewLimiter(webhook.LiveListRate, webhook.LiveListBurst)}
	if o.credentialConfigMaps {
		o.config.ConfigMaps = webhook.NewKubeConfigMaps(client)
	}
	policy := webhook.NewCachedNamespacePolicy(client)
	o.config.Policy = policy
	mutator, err := webhook.NewMutator(o.config, versions, log)
	if err != nil {
		return err
	}
	// Ready (/readyz) once the node, quota and LimitRange, and PersistentVolume caches have
	// synced, while the serving certificate is valid, and until SIGTERM: only then does the
	// Service send this replica admissions.
	var server *webhook.Server
	ready := func() bool { return versions.Ready() && policy.Ready() && prebound.Ready() && server.Ready() }
	server, err = webhook.NewServer(webhook.ServerConfig{
		Addr:            o.listen,
		CertFile:        o.certFile,
		KeyFile:         o.keyFile,
		ShutdownTimeout: o.shutdownTimeout,
		ShutdownDelay:   o.shutdownDelay,
	}, webhook.NewMux(mutator, ready), log)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { versions.Run(ctx) })
	wg.Go(func() { policy.Run(ctx) })
	wg.Go(func() { prebound.Run(ctx) })
	err = server.ListenAndServe(ctx)
	cancel() // stop the informers too when the server failed on its own
	wg.Wait()
	return err
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gcsfuse-webhook: %v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: o.logLevel}))
	slog.SetDefault(log)
	klog.SetSlogLogger(log) // client-go logs through klog; keep one JSON stream

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Info("starting", "listen", o.listen, "driver", o.config.DriverName, "sidecarImage", o.config.SidecarImage)
	if err := run(ctx, o, log); err != nil {
		log.Error("exiting", "error", err)
		stop()
		os.Exit(1)
	}
	log.Info("stopped")
}
