// Command gcsfuse-csi-controller is the driver's dynamic provisioner: a Deployment that
// gives each PersistentVolumeClaim of the driver's StorageClasses a directory of its own in
// the class's bucket (package pkg/provision). The node plugin and the sidecar mount those
// volumes like any other; nothing here is on a pod's mount path.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller/metrics"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/provision"
)

var version = "dev"

const (
	// Leader election: a standby takes over within leaseDuration of a leader that died; a
	// leader that stops (SIGTERM, a rollout) releases the lease, so the standby takes over
	// at once.
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
	// failedProvisionThreshold: a claim refused this many times in a row (a bucket that
	// does not exist, rights not granted) is no longer retried; its Events say why. With
	// the library's back-off (15 s doubling to 1000 s) that is about 3 hours.
	failedProvisionThreshold = 20
	// provisionTimeout and deletionTimeout bound one Provision and one Delete; a Delete
	// that runs out is retried and goes on where it stopped.
	provisionTimeout = 2 * time.Minute
	deletionTimeout  = 10 * time.Minute
	// shutdownTimeout bounds the metrics server's stop.
	shutdownTimeout = 5 * time.Second
	// scopeReadWrite is the OAuth scope of the provisioner's identity.
	scopeReadWrite = "https://www.googleapis.com/auth/devstorage.read_write"
)

// Authentication modes of --gcs-auth.
const (
	authADC  = "adc"
	authNone = "none"
)

type options struct {
	driverName     string
	kubeconfig     string
	gcsEndpoint    string
	gcsAuth        string
	leaderElect    bool
	leaderElectNS  string
	metricsAddr    string
	verbose        bool
	printedVersion bool
}

func parseFlags(args []string, out io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gcsfuse-csi-controller", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.driverName, "driver-name", contract.DriverName, "the CSI driver's name: StorageClasses name it as their provisioner, and the volumes made are for it (the node plugin's --driver-name)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (empty: in-cluster)")
	fs.StringVar(&o.gcsEndpoint, "gcs-endpoint", "", "GCS JSON API endpoint, e.g. an emulator's http://host:port/storage/v1/ (empty: Google Cloud Storage)")
	fs.StringVar(&o.gcsAuth, "gcs-auth", authADC, "identity of the calls to GCS: "+authADC+" (Application Default Credentials: on GKE the Workload Identity of this pod's service account, elsewhere GOOGLE_APPLICATION_CREDENTIALS) or "+authNone+" (anonymous, for an emulator)")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "run only while holding the lease, so that replicas take over from each other")
	fs.StringVar(&o.leaderElectNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the lease (default $POD_NAMESPACE)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve /metrics and /healthz on this address, e.g. :9810 (empty: off)")
	fs.BoolVar(&o.verbose, "v", false, "debug logging")
	fs.BoolVar(&o.printedVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := contract.ValidateDriverName(o.driverName); err != nil {
		return nil, err
	}
	if o.gcsAuth != authADC && o.gcsAuth != authNone {
		return nil, fmt.Errorf("--gcs-auth %q: want %s or %s", o.gcsAuth, authADC, authNone)
	}
	if o.leaderElect && o.leaderElectNS == "" && !o.printedVersion {
		return nil, errors.New("--leader-elect needs --leader-election-namespace (or $POD_NAMESPACE)")
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-addr %q: %w", o.metricsAddr, err)
		}
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gcsfuse-csi-controller: %v\n", err)
		os.Exit(2)
	}
	if o.printedVersion {
		fmt.Println(version)
		return
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	klog.SetSlogLogger(log) // client-go and the provisioner library log through klog

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Info("starting", "version", version, "driver", o.driverName, "gcsEndpoint", o.gcsEndpoint, "gcsAuth", o.gcsAuth, "leaderElect", o.leaderElect)
	if err := run(ctx, o, log); err != nil {
		log.Error("exiting", "error", err)
		stop()
		os.Exit(1)
	}
	log.Info("stopped")
}

// gcsClient is the HTTP client of the provisioner's identity, and how errors name it.
func gcsClient(o *options) (*http.Client, string, error) {
	if o.gcsAuth == authNone {
		return &http.Client{}, "the provisioner (anonymous, --gcs-auth=none)", nil
	}
	creds, err := credentials.DetectDefault(&credentials.DetectOptions{Scopes: []string{scopeReadWrite}})
	if err != nil {
		return nil, "", fmt.Errorf("--gcs-auth=%s: no Application Default Credentials: %w (on GKE give the controller's service account Workload Identity; elsewhere mount a key and set GOOGLE_APPLICATION_CREDENTIALS)", authADC, err)
	}
	client, err := httptransport.NewClient(&httptransport.Options{Credentials: creds})
	if err != nil {
		return nil, "", fmt.Errorf("GCS client: %w", err)
	}
	return client, "the provisioner's identity (Application Default Credentials of the gcsfuse-csi-controller pods)", nil
}

func run(ctx context.Context, o *options, log *slog.Logger) error {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	httpClient, identity, err := gcsClient(o)
	if err != nil {
		return err
	}
	gcs, err := provision.NewGCS(o.gcsEndpoint, httpClient)
	if err != nil {
		return err
	}
	p, err := provision.New(provision.Config{DriverName: o.driverName, GCS: gcs, Identity: identity, Log: log})
	if err != nil {
		return err
	}

	m, reg := newMetrics()
	stopMetrics, err := serveMetrics(o.metricsAddr, reg, log)
	if err != nil {
		return err
	}
	defer stopMetrics()

	runProvisioner := func(ctx context.Context) {
		pc := controller.NewProvisionController(ctx, client, o.driverName, p,
			controller.LeaderElection(false), // ours, below: it releases the lease on stop
			controller.MetricsInstance(m),
			controller.FailedProvisionThreshold(failedProvisionThreshold),
			controller.ProvisionTimeout(provisionTimeout),
			controller.DeletionTimeout(deletionTimeout),
		)
		pc.Run(ctx)
	}
	if !o.leaderElect {
		runProvisioner(ctx)
		return nil
	}
	host, _ := os.Hostname()
	return lead(ctx, client, o.leaderElectNS, host, log, runProvisioner)
}

// leaseName is the Lease the replicas elect their leader with.
const leaseName = "gcsfuse-csi-controller"

// lead runs work while id holds the lease in namespace, and returns when ctx ends (the lease
// released, so that a standby takes over at once instead of after leaseDuration) or with an
// error when the lease was lost while leading.
func lead(ctx context.Context, client kubernetes.Interface, namespace, id string, log *slog.Logger, work func(context.Context)) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, leaseName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	lost := make(chan struct{})
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leading: provisioning", "lease", namespace+"/"+leaseName)
				work(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					close(lost)
				}
			},
			OnNewLeader: func(leader string) {
				if leader != id {
					log.Info("standing by", "leader", leader)
				}
			},
		},
	})
	select {
	case <-lost:
		return errors.New("lost the lease while leading; exiting so that a fresh start waits for it again")
	default:
		return nil
	}
}

// newMetrics are the provisioning library's collectors, which its provision controller
// records, on the registry /metrics serves: the families metricscatalog.ControllerFamilies
// declares for the reference (TestMetricsAreTheCatalogs fails when they differ).
func newMetrics() (metrics.Metrics, *prometheus.Registry) {
	m := metrics.New("controller")
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.PersistentVolumeClaimProvisionTotal, m.PersistentVolumeClaimProvisionFailedTotal,
		m.PersistentVolumeClaimProvisionDurationSeconds, m.PersistentVolumeDeleteTotal,
		m.PersistentVolumeDeleteFailedTotal, m.PersistentVolumeDeleteDurationSeconds)
	return m, reg
}

// serveMetrics serves reg on /metrics and a liveness answer on /healthz at addr ("" does
// nothing); the returned function stops the server.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "error", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
