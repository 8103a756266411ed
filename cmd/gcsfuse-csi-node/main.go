// Command gcsfuse-csi-node is the privileged CSI node plugin (a DaemonSet): it mounts pod
// volumes with a FUSE descriptor handed to the pod's sidecar, and watches the pods of its
// node to tell legacy sidecars when the workload is done.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodeplugin"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podmetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/registration"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/runtimewatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
)

var version = "dev"

// runtimeAuto is the --runtime-endpoint value that looks for the runtime's usual sockets.
const runtimeAuto = "auto"

func main() {
	fusemount.RunProbeIfAsked() // the node plugin re-executes itself to stat a possibly dead mount
	os.Exit(run())
}

func run() int {
	endpoint := flag.String("endpoint", "unix:///csi/csi.sock", "CSI endpoint")
	nodeID := flag.String("node-id", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	kubeletRoot := flag.String("kubelet-root", "/var/lib/kubelet", "kubelet root directory")
	driverName := flag.String("driver-name", contract.DriverName, "the CSI driver name to register: "+strings.Join(contract.DriverNames, " or ")+" (the GKE driver's, on a cluster that does not run it, so that volumes written for it need no edit); the CSIDriver object and the webhook must use the same")
	stateDir := flag.String("state-dir", "", "where offers not yet taken by a sidecar are recorded, to offer them again after a restart (default <kubelet-root>/plugins/<driver-name>/offers; \"-\" disables)")
	sharedDir := flag.String("shared-dir", "", "directory of the shared mount mode: the node mounter's hostPath and the shared FUSE mounts, e.g. <kubelet-root>/plugins/<driver-name>/shared (empty: no mounter runs, and volumes with "+contract.AttrMountMode+": "+contract.MountModeShared+" are refused)")
	sharedLinger := flag.Duration("shared-linger", sharedmount.DefaultLinger, "how long a shared mount outlives the last pod that used it, so that pods run one after another mount once")
	sharedWIFProvider := flag.String("shared-wif-provider", "", "Workload Identity Federation provider for the shared volumes ("+contract.AttrMountMode+": "+contract.MountModeShared+") without a Secret or a provider of their own, when --wif-provider is empty: each pod's own token is exchanged there, instead of the mounter's Application Default Credentials (on GKE: identitynamespace:PROJECT.svc.id.goog:https://container.googleapis.com/v1/projects/PROJECT/locations/LOCATION/clusters/CLUSTER)")
	sharedADC := flag.String("shared-adc-namespaces", "", "comma separated namespaces whose shared volumes may read with the mounter's Application Default Credentials (\""+credentials.AllNamespaces+"\": all); the others' are refused (empty: none)")
	gcsEndpoint := flag.String("gcs-endpoint", "", "GCS endpoint for every volume, e.g. an emulator's http://host:port/storage/v1/ (empty: Google Cloud Storage)")
	wifProvider := flag.String("wif-provider", "", "Workload Identity Federation provider for every volume without a Secret, the STS audience //iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER (empty: Application Default Credentials, unless a volume sets "+contract.AttrWorkloadIdentityProvider+")")
	wifTokenAudience := flag.String("wif-token-audience", contract.TokenAudience, "audience of the kubelet's service account token to exchange: the CSIDriver's tokenRequests audience (the chart passes its tokenRequest.audience); empty: the CSIDriver has no tokenRequests, so no token comes and Workload Identity Federation is off")
	wifTokenURL := flag.String("wif-token-url", credentials.DefaultTokenURL, "STS token exchange endpoint")
	wifAllowedTokenURLs := flag.String("wif-allowed-token-urls", "", "comma separated further STS endpoints a volume may choose with the "+contract.AttrTokenURL+" attribute")
	wifServiceAccount := flag.String("wif-service-account", "", "Google service account the federated identity impersonates by default (empty: none; a volume may set "+contract.AttrServiceAccount+")")
	iamCredentialsURL := flag.String("iam-credentials-url", credentials.DefaultIAMCredentialsURL, "base URL of the IAM Credentials API (service account impersonation)")
	keyTokenURIs := flag.String("key-token-uris", credentials.DefaultKeyTokenURI, "comma separated token_uri values a service account key from a Secret may carry")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig (empty: in-cluster when running in a pod)")
	watchPods := flag.Bool("watch-pods", true, "watch this node's pods to end legacy sidecars (needs API access)")
	runtimeEndpoint := flag.String("runtime-endpoint", runtimeAuto, "CRI endpoint of this node, e.g. unix:///run/containerd/containerd.sock: the node plugin learns from it the moment a pod's workload containers exit, and tells the sidecar at once (\""+runtimeAuto+"\": the first of "+strings.Join(containerexit.DefaultEndpoints, ", ")+" that exists; \"\": none, the API server alone, seconds later)")
	runtimeEvents := flag.String("runtime-events", string(runtimewatch.ModeAuto), "how container exits are learnt: auto (the CRI event stream on runtimes that give each reader every event, containerd >= 2; else a node-wide ListContainers every 100 ms), events, poll")
	machineType := flag.String("machine-type", machineTypeAuto, "machine type given to every gcsfuse (--machine-type), sparing it the GCE metadata lookups it makes at each start: \""+machineTypeAuto+"\" (this Node's node.kubernetes.io/instance-type label, or \"unknown\" without one), \""+machineTypeLookup+"\" (gcsfuse asks the metadata server), or an instance type; a volume's mountOptions may set its own")
	metricsAddr := flag.String("metrics-addr", "", "serve Prometheus metrics on this address (empty: off)")
	podSyncTimeout := flag.Duration("pod-sync-timeout", podwatch.DefaultSyncTimeout, "warn when this node's pods cannot be listed within this time (the node plugin keeps serving CSI calls and retrying)")
	verbose := flag.Bool("v", false, "debug logging")
	regSocket := flag.String("registration-socket", "", "serve the kubelet plugin registration API on this socket, e.g. /var/lib/kubelet/plugins_registry/<driver-name>-reg.sock (empty: off, an external registrar registers the driver)")
	httpsProxy := flag.String("https-proxy", "", "proxy every volume's gcsfuse sends its https:// requests through (its HTTPS_PROXY: storage, token exchanges), e.g. http://proxy.corp:3128 (empty: none; the user and password a URL may carry are never logged)")
	httpProxy := flag.String("http-proxy", "", "proxy for gcsfuse's http:// requests (its HTTP_PROXY; an http:// emulator endpoint)")
	noProxy := flag.String("no-proxy", "", "hosts gcsfuse reaches without the proxy (its NO_PROXY: comma separated names, .domains, IPs, CIDRs; localhost and loopback IPs never go through a proxy)")
	caBundleFile := flag.String("ca-bundle-file", "", "PEM file of CA certificates every volume's gcsfuse trusts besides the system's roots (a private CA of the storage endpoint or of a TLS-inspecting proxy); read at start")
	kubeletCSIEndpoint := flag.String("kubelet-csi-endpoint", "", "the CSI socket path as the kubelet sees it on the host (for --registration-socket; default <kubelet-root>/plugins/<driver-name>/csi.sock)")
	flag.Parse()
	noToken := *wifTokenAudience == ""

	lvl := slog.LevelInfo
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	slog.SetDefault(log)
	if *nodeID == "" {
		log.Error("--node-id (or $NODE_NAME) is required")
		return 2
	}
	if err := contract.ValidateDriverName(*driverName); err != nil {
		log.Error("--driver-name", "err", err)
		return 2
	}
	proxy := netconf.Proxy{HTTPS: *httpsProxy, HTTP: *httpProxy, NoProxy: *noProxy}
	adc, err := credentials.ParseSharedADC(*sharedADC)
	if err != nil {
		log.Error("invalid configuration", "flag", "--shared-adc-namespaces", "err", err)
		return 2
	}
	caBundle, err := readCABundle(*caBundleFile)
	if err != nil {
		log.Error("--ca-bundle-file", "err", err)
		return 2
	}
	if *kubeletCSIEndpoint == "" {
		*kubeletCSIEndpoint = filepath.Join(*kubeletRoot, "plugins", *driverName, "csi.sock")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		log.Error("metrics", "err", err)
		return 1
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		log.Error("metrics", "err", err)
		return 1
	}
	metrics, err := podwatch.NewMetrics(reg)
	if err != nil {
		log.Error("metrics", "err", err)
		return 1
	}
	eventsMode, err := runtimewatch.ParseMode(*runtimeEvents)
	if err != nil {
		log.Error("--runtime-events", "err", err)
		return 2
	}
	rtMetrics, err := runtimewatch.NewMetrics(reg)
	if err != nil {
		log.Error("metrics", "err", err)
		return 1
	}
	// The lifecycle learns container exits from the runtime; it needs the API for the pod
	// specs (restart policies, deletion), and follows stopping pods in the runtime alone
	// without it.
	lc := &nodeplugin.ExitCoordinator{KubeletRoot: *kubeletRoot, Log: log, Metrics: metrics}
	var rtWatch *runtimewatch.Watcher
	criEndpoint := *runtimeEndpoint
	if criEndpoint == runtimeAuto {
		if criEndpoint = containerexit.Detect(containerexit.DefaultEndpoints); criEndpoint == "" {
			log.Warn("no container runtime socket found", "looked for", strings.Join(containerexit.DefaultEndpoints, ", "))
		}
	}
	if criEndpoint != "" {
		rt, err := containerexit.Dial(criEndpoint)
		if err != nil {
			log.Error("container runtime", "err", err)
			return 1
		}
		defer rt.Close()
		rtWatch, err = runtimewatch.New(runtimewatch.Config{Client: rt, Mode: eventsMode, OnChange: lc.ContainersChanged, Log: log, Metrics: rtMetrics})
		if err != nil {
			log.Error("runtime watch", "err", err)
			return 2
		}
		lc.Runtime = rtWatch
	} else {
		log.Warn("no container runtime: the node plugin learns that a workload is done from the API server, a second or more after the runtime knows (a native sidecar is then stopped by the kubelet, about 2 s later per pod), and cannot see the containers of a stopping pod (deleted, evicted, past its activeDeadlineSeconds) exit, so their sidecars serve until their drain deadline")
	}

	var ns *csidriver.NodeServer // set below, before the metrics server starts
	nodeMetrics, err := csidriver.NewMetrics(reg, func() int { return ns.PublishedVolumes() })
	if err != nil {
		log.Error("metrics", "err", err)
		return 1
	}
	// gatherers is what the metrics endpoint serves: the node plugin's own metrics and, with
	// the pod watch, the gcsfuse metrics of every pod of the node (pkg/podmetrics).
	gatherers := prometheus.Gatherers{reg}
	var events csidriver.EventSink
	var newWatcher func() *podwatch.Watcher
	var nodes corev1client.NodeInterface
	var current *currentWatcher // nil without --watch-pods
	if *watchPods {
		cfg, err := restConfig(*kubeconfig)
		if err != nil {
			log.Error("no Kubernetes API access; run with --watch-pods=false to serve CSI only", "err", err)
			return 1
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			log.Error("kubernetes client", "err", err)
			return 1
		}
		rec, stopRec := podwatch.NewEventRecorder(client, *nodeID)
		defer stopRec()
		events = nodeplugin.Events{Recorder: rec}
		lc.Events = events
		lc.API = client.CoreV1()
		nodes = client.CoreV1().Nodes()
		current = &currentWatcher{driverName: *driverName}
		lc.Pods = current
		if err := podwatch.RegisterPodsTracked(reg, func() int { return len(current.driverPods()) }); err != nil {
			log.Error("metrics", "err", err)
			return 1
		}
		podMetrics, err := podmetrics.New(podmetrics.Config{KubeletRoot: *kubeletRoot, Pods: current.metricsPods, Log: log}, reg)
		if err != nil {
			log.Error("pod metrics", "err", err)
			return 2
		}
		gatherers = append(gatherers, podMetrics)
		newWatcher = func() *podwatch.Watcher {
			w := podwatch.New(client, *nodeID, lc, podwatch.WithLogger(log), podwatch.WithMetrics(metrics),
				podwatch.WithSyncTimeout(*podSyncTimeout), podwatch.WithDriverName(*driverName))
			current.set(w)
			return w
		}
	}
	// Deferred after the event recorder's stop, so it runs before it: a follower that
	// releases a sidecar while stopping still records its Event. The runtime closes last.
	defer lc.Close(2 * time.Second)

	initialMT, learnMT := initialMachineType(*machineType, nodes != nil, log)
	ns, err = csidriver.NewNodeServer(csidriver.Config{
		NodeID: *nodeID, KubeletRoot: *kubeletRoot, SidecarUID: contract.SidecarUID, SidecarGID: contract.SidecarGID,
		Pods: podLookup(lc.Pods), GCSEndpoint: *gcsEndpoint, MachineType: initialMT, StateDir: offerDir(*stateDir, *kubeletRoot, *driverName),
		Credentials: credentials.Config{
			Provider: *wifProvider, SharedProvider: *sharedWIFProvider, TokenAudience: *wifTokenAudience, NoServiceAccountToken: noToken, TokenURL: *wifTokenURL,
			AllowedTokenURLs: mountopts.Split(*wifAllowedTokenURLs), ServiceAccount: *wifServiceAccount,
			IAMCredentialsURL: *iamCredentialsURL, KeyTokenURIs: mountopts.Split(*keyTokenURIs),
		},
		OnTerminating: lc.SidecarTerminating, Metrics: nodeMetrics, Proxy: proxy, CABundle: caBundle,
		SharedDir: *sharedDir, SharedLinger: *sharedLinger, SharedADC: adc,
	}, events, log)
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	defer ns.Close()
	if dir, keys, users, ok := ns.SharedMetrics(); ok {
		if err := reg.Register(users); err != nil {
			log.Error("metrics", "err", err)
			return 1
		}
		if current != nil {
			// The mounter's gcsfuse series, labelled with the sharing key as volume.
			current.mounter = func() (podmetrics.Pod, bool) {
				k := keys()
				return podmetrics.Pod{UID: "shared-mounter", Name: contract.SharedMounterContainerName, Volumes: k, Dir: dir}, len(k) > 0
			}
		}
	}
	if n, err := ns.RecoverShared(); err != nil || n > 0 {
		log.Info("shared mounts found, left by the previous node plugin", "keys", n, "err", err)
	}
	if n, err := ns.RecoverOffers(ctx); err != nil || n > 0 {
		log.Info("recovered offers left by the previous node plugin", "volumes", n, "err", err)
	}
	ln, err := csidriver.Listen(*endpoint)
	if err != nil {
		log.Error("listen", "endpoint", *endpoint, "err", err)
		return 1
	}
	srv := csidriver.NewGRPCServer(&csidriver.IdentityServer{Name: *driverName, Version: version}, ns, log)

	// runCtx ends the components on a signal and when a critical one fails.
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	// errs carries the end of the critical components: the CSI server, the registrar, the
	// metrics server. The pod watch is not one of them (see superviseWatch).
	errs := make(chan error, 4)
	go func() { errs <- srv.Serve(ln) }()
	// Registered only once the CSI socket listens: the kubelet dials it to validate us.
	if *regSocket != "" {
		registrar, err := registration.New(registration.Config{DriverName: *driverName, SocketPath: *regSocket, KubeletCSIEndpoint: *kubeletCSIEndpoint, Log: log})
		if err != nil {
			log.Error("registration", "err", err)
			return 2
		}
		go func() {
			// nil means ctx ended: the shutdown path below handles that.
			if err := registrar.Serve(runCtx); err != nil {
				errs <- err
			}
		}()
	}
	rtDone := make(chan struct{})
	if rtWatch != nil {
		go func() { // owned by run: ends with runCtx
			defer close(rtDone)
			if err := rtWatch.Run(runCtx); err != nil {
				log.Error("runtime watch", "err", err)
			}
		}()
	} else {
		close(rtDone)
	}
	mtDone := make(chan struct{})
	if learnMT {
		go func() { // owned by run: ends with runCtx, or once the Node has answered
			defer close(mtDone)
			learnMachineType(runCtx, nodes, *nodeID, ns.SetMachineType, log)
		}()
	} else {
		close(mtDone)
	}
	watchDone := make(chan struct{})
	if newWatcher != nil {
		go func() { // owned by run: ends with runCtx
			defer close(watchDone)
			superviseWatch(runCtx, func(ctx context.Context) error { return newWatcher().Run(ctx) }, defaultWatchRestart, log)
		}()
	} else {
		close(watchDone)
	}
	var msrv *http.Server
	if *metricsAddr != "" {
		msrv = &http.Server{Addr: *metricsAddr, Handler: promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := msrv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
	}
	log.Info("node plugin serving", "driver", *driverName, "version", version, "endpoint", *endpoint, "node", *nodeID, "watchPods", *watchPods,
		"runtimeEndpoint", criEndpoint, "runtimeEvents", eventsMode, "gcsEndpoint", *gcsEndpoint,
		"wifProvider", *wifProvider, "wifTokenAudience", *wifTokenAudience, "wifTokenURL", *wifTokenURL,
		"proxy", proxy, "caBundleFile", *caBundleFile)

	code := 0
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err := <-errs:
		log.Error("node plugin component ended", "err", err)
		code = 1
	}
	cancelRun()
	// Mounts stay: pods keep their volumes while the node plugin restarts.
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	// With no shared mount and no mounter left (uninstall), the shared directory goes too;
	// a shared publish the stop left running keeps it (CleanUpShared).
	ns.CleanUpShared()
	if msrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = msrv.Shutdown(sctx)
		cancel()
	}
	<-mtDone // each of its calls is bounded by nodeGetTimeout, and runCtx has ended
	select { // the pod watch bounds its own shutdown; this bound is a backstop
	case <-watchDone:
	case <-time.After(podwatch.DefaultShutdownTimeout + time.Second):
		log.Warn("pod watch still stopping; exiting anyway")
	}
	select { // runtime calls are bounded by containerexit.CallTimeout
	case <-rtDone:
	case <-time.After(containerexit.CallTimeout + time.Second):
		log.Warn("runtime watch still stopping; exiting anyway")
	}
	return code
}

// readCABundle reads --ca-bundle-file (nil without one); the node server checks its content.
func readCABundle(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, netconf.MaxCABundle+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

func offerDir(flagValue, kubeletRoot, driverName string) string {
	switch flagValue {
	case "-":
		return ""
	case "":
		return filepath.Join(kubeletRoot, "plugins", driverName, "offers")
	}
	return flagValue
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

// currentWatcher answers the lifecycle's pod lookups from the pod watch that runs now: the
// supervisor builds a new one if a watch ever ends.
type currentWatcher struct {
	w          atomic.Pointer[podwatch.Watcher]
	driverName string
	// mounter, if set, is the shared mounter's metrics source (set before the metrics
	// server starts).
	mounter func() (podmetrics.Pod, bool)
}

func (c *currentWatcher) set(w *podwatch.Watcher) { c.w.Store(w) }

// podLookup is csidriver.Config.Pods from the pod watcher's cache; nil without one.
func podLookup(pods nodeplugin.PodLookup) csidriver.PodLookup {
	if pods == nil {
		return nil
	}
	return func(uid string) (*corev1.Pod, bool) { return pods.PodByUID(types.UID(uid)) }
}

// PodByUID implements nodeplugin.PodLookup.
func (c *currentWatcher) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	if w := c.w.Load(); w != nil {
		return w.PodByUID(uid)
	}
	return nil, false
}

// driverPods lists the pods of the current watch that use the driver.
func (c *currentWatcher) driverPods() []*corev1.Pod {
	if w := c.w.Load(); w != nil {
		return w.DriverPods()
	}
	return nil
}

// metricsPods lists the pods whose sidecar metrics the node plugin re-exports.
func (c *currentWatcher) metricsPods() []podmetrics.Pod {
	var out []podmetrics.Pod
	for _, p := range c.driverPods() {
		if mp, ok := podmetrics.FromPod(p, c.driverName); ok {
			out = append(out, mp)
		}
	}
	if c.mounter != nil {
		if mp, ok := c.mounter(); ok {
			out = append(out, mp)
		}
	}
	return out
}
