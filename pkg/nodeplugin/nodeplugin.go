package nodeplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitcoord"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podmetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/registration"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/runtimewatch"
)

// Bounds of the shutdown: the CSI server's graceful stop before it is stopped hard, the
// metrics server's, and the exit coordinator's followers.
const (
	grpcStopTimeout    = 5 * time.Second
	metricsStopTimeout = 2 * time.Second
	coordinatorClose   = 2 * time.Second
	metricsReadHeader  = 5 * time.Second
)

// Plugin is the node plugin built from a Config: New builds it, Run serves it, once.
type Plugin struct {
	cfg Config
	log *slog.Logger

	gatherers   prometheus.Gatherers
	coordinator *exitcoord.ExitCoordinator
	runtime     io.Closer // the CRI client, nil without a runtime
	rtWatch     *runtimewatch.Watcher
	criEndpoint string
	eventsMode  runtimewatch.Mode
	stopEvents  func()
	newWatcher  func() *podwatch.Watcher // nil without the pod watch
	nodes       corev1client.NodeInterface
	learnMT     bool
	node        *csidriver.NodeServer
	registrar   *registration.Server // nil without a registration socket
	proxy       netconf.Proxy
}

// New builds every part from cfg. An error wrapping ErrInvalidConfig means cfg cannot run;
// any other, that the node does not give what the plugin needs (its runtime, its API
// access). What New built is released when it fails; on success Run releases it.
func New(cfg Config) (_ *Plugin, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Plugin{cfg: cfg, log: cfg.Log, proxy: netconf.Proxy{HTTPS: cfg.HTTPSProxy, HTTP: cfg.HTTPProxy, NoProxy: cfg.NoProxy}}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	invalid := func(what string, err error) error { return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, what, err) }
	adc, err := credentials.ParseSharedADC(cfg.SharedADCNamespaces)
	if err != nil {
		return nil, invalid("--shared-adc-namespaces", err)
	}
	caBundle, err := readCABundle(cfg.CABundleFile)
	if err != nil {
		return nil, invalid("--ca-bundle-file", err)
	}
	if p.eventsMode, err = runtimewatch.ParseMode(cfg.RuntimeEvents); err != nil {
		return nil, invalid("--runtime-events", err)
	}

	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})), reg.Register(collectors.NewGoCollector())); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	metrics, err := podwatch.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	rtMetrics, err := runtimewatch.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// The lifecycle learns container exits from the runtime; it needs the API for the pod
	// specs (restart policies, deletion), and follows stopping pods in the runtime alone
	// without it.
	p.coordinator = &exitcoord.ExitCoordinator{KubeletRoot: cfg.KubeletRoot, Log: p.log, Metrics: metrics}
	if err := p.dialRuntime(rtMetrics); err != nil {
		return nil, err
	}

	var node *csidriver.NodeServer // set below, before the metrics server starts
	nodeMetrics, err := csidriver.NewMetrics(reg, func() int { return node.PublishedVolumes() })
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	// gatherers is what the metrics endpoint serves: the node plugin's own metrics and, with
	// the pod watch, the gcsfuse metrics of every pod of the node (pkg/podmetrics).
	p.gatherers = prometheus.Gatherers{reg}
	var events csidriver.EventSink
	var current *currentWatcher // nil without the pod watch
	if cfg.WatchPods {
		if events, current, err = p.watchPods(reg, metrics); err != nil {
			return nil, err
		}
	}

	initialMT, learnMT := initialMachineType(cfg.MachineType, p.nodes != nil, p.log)
	p.learnMT = learnMT
	node, err = csidriver.NewNodeServer(csidriver.Config{
		NodeID: cfg.NodeID, KubeletRoot: cfg.KubeletRoot, SidecarUID: contract.SidecarUID, SidecarGID: contract.SidecarGID,
		Pods: podLookup(p.coordinator.Pods), GCSEndpoint: cfg.GCSEndpoint, MachineType: initialMT, StateDir: cfg.offerDir(),
		Credentials:   cfg.credentials(),
		OnTerminating: p.coordinator.SidecarTerminating, Metrics: nodeMetrics, Proxy: p.proxy, CABundle: caBundle,
		SharedDir: cfg.SharedDir, SharedLinger: cfg.SharedLinger, SharedADC: adc,
	}, events, p.log)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	p.node = node
	p.coordinator.OnSidecarFailed = node.SidecarEnded
	if dir, keys, users, ok := node.SharedMetrics(); ok {
		if err := reg.Register(users); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		if current != nil {
			// The mounter's gcsfuse series, labelled with the sharing key as volume.
			current.mounter = func() (podmetrics.Pod, bool) {
				k := keys()
				return podmetrics.Pod{UID: "shared-mounter", Name: contract.SharedMounterContainerName, Volumes: k, Dir: dir}, len(k) > 0
			}
		}
	}
	if cfg.RegistrationSocket != "" {
		p.registrar, err = registration.New(registration.Config{DriverName: cfg.DriverName, SocketPath: cfg.RegistrationSocket, KubeletCSIEndpoint: cfg.KubeletCSIEndpoint, Log: p.log})
		if err != nil {
			return nil, invalid("registration", err)
		}
	}
	return p, nil
}

// dialRuntime connects the container runtime (Config.RuntimeEndpoint) and builds its watch,
// which tells the exit coordinator of container changes; without one, it says what is lost.
func (p *Plugin) dialRuntime(rtMetrics *runtimewatch.Metrics) error {
	p.criEndpoint = p.cfg.RuntimeEndpoint
	if p.criEndpoint == RuntimeAuto {
		if p.criEndpoint = containerexit.Detect(containerexit.DefaultEndpoints); p.criEndpoint == "" {
			p.log.Warn("no container runtime socket found", "looked for", strings.Join(containerexit.DefaultEndpoints, ", "))
		}
	}
	if p.criEndpoint == "" {
		p.log.Warn("no container runtime: the node plugin learns that a workload is done from the API server, a second or more after the runtime knows (a native sidecar is then stopped by the kubelet, about 2 s later per pod), and cannot see the containers of a stopping pod (deleted, evicted, past its activeDeadlineSeconds) exit, so their sidecars serve until their drain deadline")
		return nil
	}
	rt, err := containerexit.Dial(p.criEndpoint)
	if err != nil {
		return fmt.Errorf("container runtime: %w", err)
	}
	p.runtime = rt
	p.rtWatch, err = runtimewatch.New(runtimewatch.Config{Client: rt, Mode: p.eventsMode, OnChange: p.coordinator.ContainersChanged, Log: p.log, Metrics: rtMetrics})
	if err != nil {
		return fmt.Errorf("%w: runtime watch: %w", ErrInvalidConfig, err)
	}
	p.coordinator.Runtime = p.rtWatch
	return nil
}

// watchPods connects the API server for this node's pods: the Events, the pod lookups of the
// exit coordinator and the node service, the pods' gcsfuse metrics, and the pod watch that
// Run supervises.
func (p *Plugin) watchPods(reg *prometheus.Registry, metrics *podwatch.Metrics) (csidriver.EventSink, *currentWatcher, error) {
	cfg, err := restConfig(p.cfg.Kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("no Kubernetes API access; run with --watch-pods=false to serve CSI only: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rec, stopRec := podwatch.NewEventRecorder(client, p.cfg.NodeID)
	p.stopEvents = stopRec
	events := exitcoord.Events{Recorder: rec}
	p.coordinator.Events = events
	p.coordinator.API = client.CoreV1()
	p.nodes = client.CoreV1().Nodes()
	current := &currentWatcher{driverName: p.cfg.DriverName}
	p.coordinator.Pods = current
	if err := podwatch.RegisterPodsTracked(reg, func() int { return len(current.driverPods()) }); err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	podMetrics, err := podmetrics.New(podmetrics.Config{KubeletRoot: p.cfg.KubeletRoot, Pods: current.metricsPods, Log: p.log}, reg)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: pod metrics: %w", ErrInvalidConfig, err)
	}
	p.gatherers = append(p.gatherers, podMetrics)
	p.newWatcher = func() *podwatch.Watcher {
		w := podwatch.New(client, p.cfg.NodeID, p.coordinator, podwatch.WithLogger(p.log), podwatch.WithMetrics(metrics),
			podwatch.WithSyncTimeout(p.cfg.PodSyncTimeout), podwatch.WithDriverName(p.cfg.DriverName))
		current.set(w)
		return w
	}
	return events, current, nil
}

// part is one thing close stops.
type part struct {
	name string
	stop func()
}

// parts are what close stops, in this order: the node service first (no publish starts a
// follow after it), the exit coordinator next (its followers may still record Events and
// read the runtime as they end), then the Events' broadcaster (after the last Event), then
// the runtime's client (after the last read): a follower that releases a sidecar while the
// plugin stops still records its Event.
func (p *Plugin) parts() []part {
	var ps []part
	if p.node != nil {
		ps = append(ps, part{"node service", p.node.Close})
	}
	if p.coordinator != nil {
		ps = append(ps, part{"exit coordinator", func() { p.coordinator.Close(coordinatorClose) }})
	}
	if p.stopEvents != nil {
		ps = append(ps, part{"events", p.stopEvents})
	}
	if p.runtime != nil {
		ps = append(ps, part{"runtime", func() { _ = p.runtime.Close() }})
	}
	return ps
}

// close releases what New built, in the order of parts.
func (p *Plugin) close() {
	for _, x := range p.parts() {
		x.stop()
	}
}

// Run serves until ctx ends (nil) or a critical part ends (its error): the CSI server, the
// registrar, the metrics server. The pod watch is not one of them (superviseWatch). Mounts
// stay when it returns: pods keep their volumes while the node plugin restarts.
func (p *Plugin) Run(ctx context.Context) error {
	defer p.close()
	if n, err := p.node.RecoverShared(); err != nil || n > 0 {
		p.log.Info("shared mounts found, left by the previous node plugin", "keys", n, "err", err)
	}
	if n, err := p.node.RecoverOffers(ctx); err != nil || n > 0 {
		p.log.Info("recovered offers left by the previous node plugin", "volumes", n, "err", err)
	}
	ln, err := csidriver.Listen(p.cfg.Endpoint)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", p.cfg.Endpoint, err)
	}
	srv := csidriver.NewGRPCServer(&csidriver.IdentityServer{Name: p.cfg.DriverName, Version: p.cfg.Version}, p.node, p.log)

	// runCtx ends the parts on a signal and when a critical one fails.
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	errs := make(chan error, 4)
	go func() { errs <- srv.Serve(ln) }()
	// Registered only once the CSI socket listens: the kubelet dials it to validate us.
	if p.registrar != nil {
		go func() {
			// nil means ctx ended: the shutdown path below handles that.
			if err := p.registrar.Serve(runCtx); err != nil {
				errs <- err
			}
		}()
	}
	rtDone := p.goUntil(p.rtWatch != nil, func() {
		if err := p.rtWatch.Run(runCtx); err != nil {
			p.log.Error("runtime watch", "err", err)
		}
	})
	// Ends with runCtx, or once the Node has answered.
	mtDone := p.goUntil(p.learnMT, func() { learnMachineType(runCtx, p.nodes, p.cfg.NodeID, p.node.SetMachineType, p.log) })
	watchDone := p.goUntil(p.newWatcher != nil, func() {
		superviseWatch(runCtx, func(ctx context.Context) error { return p.newWatcher().Run(ctx) }, defaultWatchRestart, p.log)
	})
	var msrv *http.Server
	if p.cfg.MetricsAddr != "" {
		msrv = &http.Server{Addr: p.cfg.MetricsAddr, Handler: promhttp.HandlerFor(p.gatherers, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}), ReadHeaderTimeout: metricsReadHeader}
		go func() {
			if err := msrv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
	}
	c := p.cfg
	p.log.Info("node plugin serving", "driver", c.DriverName, "version", c.Version, "endpoint", c.Endpoint, "node", c.NodeID, "watchPods", c.WatchPods,
		"runtimeEndpoint", p.criEndpoint, "runtimeEvents", p.eventsMode, "gcsEndpoint", c.GCSEndpoint,
		"wifProvider", c.WIFProvider, "wifTokenAudience", c.WIFTokenAudience, "wifTokenURL", c.WIFTokenURL,
		"proxy", p.proxy, "caBundleFile", c.CABundleFile)

	var failed error
	select {
	case <-ctx.Done():
		p.log.Info("stopping")
	case failed = <-errs:
		p.log.Error("node plugin component ended", "err", failed)
	}
	cancelRun()
	p.stopServing(srv, msrv)
	<-mtDone // each of its calls is bounded by nodeGetTimeout, and runCtx has ended
	select { // the pod watch bounds its own shutdown; this bound is a backstop
	case <-watchDone:
	case <-time.After(podwatch.DefaultShutdownTimeout + time.Second):
		p.log.Warn("pod watch still stopping; exiting anyway")
	}
	select { // runtime calls are bounded by containerexit.CallTimeout
	case <-rtDone:
	case <-time.After(containerexit.CallTimeout + time.Second):
		p.log.Warn("runtime watch still stopping; exiting anyway")
	}
	if failed != nil {
		return fmt.Errorf("node plugin component ended: %w", failed)
	}
	return nil
}

// stopServing stops the CSI server (gracefully, within grpcStopTimeout), removes the shared
// directory when nothing uses it any more, and stops the metrics server.
func (p *Plugin) stopServing(srv *grpc.Server, msrv *http.Server) {
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grpcStopTimeout):
		srv.Stop()
	}
	// With no shared mount and no mounter left (uninstall), the shared directory goes too;
	// a shared publish the stop left running keeps it (CleanUpShared).
	p.node.CleanUpShared()
	if msrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), metricsStopTimeout)
		_ = msrv.Shutdown(sctx)
		cancel()
	}
}

// goUntil runs f in a goroutine Run owns when on, and returns a channel closed when f has
// returned (at once when off).
func (p *Plugin) goUntil(on bool, f func()) <-chan struct{} {
	done := make(chan struct{})
	if !on {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		f()
	}()
	return done
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

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
