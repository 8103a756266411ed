// Command gcs-emulator serves an in-memory GCS API (fake-gcs-server) for the demo, the tests
// and local clusters; with --auth, behind internal/testing/emulatorauth's token checks (a token
// endpoint, an STS that validates Kubernetes tokens with the API server's TokenReview, and
// per-bucket policies).
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/emulatorauth"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
)

func main() { os.Exit(run()) }

func run() int {
	host := flag.String("host", "127.0.0.1", "address to listen on and advertise")
	port := flag.Int("port", 4443, "port to listen on")
	buckets := flag.String("buckets", "", "comma-separated buckets to create at start")
	auth := flag.Bool("auth", false, "check tokens: buckets with a policy (set through the admin API) answer only authorized bearer tokens")
	lifetime := flag.Duration("token-lifetime", emulatorauth.DefaultTokenLifetime, "lifetime of the access tokens it issues (--auth)")
	provider := flag.String("wif-provider", "", "Workload Identity provider the STS accepts as audience (--auth; empty: no STS)")
	tokenAudience := flag.String("wif-token-audience", "gcsfuse.csi.storage", "audience a Kubernetes service account token must have (TokenReview)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig for TokenReview (empty: in-cluster)")
	publicHost := flag.String("public-host", "", "name clients reach the emulator by, if not --host (e.g. a Service's DNS name): it is in the URLs the emulator hands out, and gcsfuse wants them to match its endpoint")
	tlsCert := flag.String("tls-cert", "", "serve HTTPS with this PEM certificate (chain) for the public host; with --tls-key")
	tlsKey := flag.String("tls-key", "", "PEM private key of --tls-cert")
	adminFrom := flag.String("admin-from", "", "comma separated further addresses the admin API answers to (besides loopback and --host), e.g. the host end of the local cluster's veth")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var bs []string
	for _, b := range strings.Split(*buckets, ",") {
		if b = strings.TrimSpace(b); b != "" {
			bs = append(bs, b)
		}
	}
	opts := emulator.Options{Host: *host, Port: *port, Buckets: bs, PublicHost: *publicHost, Log: log}
	if (*tlsCert == "") != (*tlsKey == "") {
		fmt.Fprintln(os.Stderr, "gcs-emulator: --tls-cert and --tls-key go together")
		return 2
	}
	if *tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gcs-emulator: TLS key pair:", err)
			return 2
		}
		opts.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	if *auth {
		allowed := append([]string{*host}, strings.Split(*adminFrom, ",")...)
		cfg := emulatorauth.Config{TokenLifetime: *lifetime, Log: log, AdminAllowed: fromNode(allowed)}
		if *provider != "" {
			rc, err := restConfig(*kubeconfig)
			if err != nil {
				log.Error("the STS needs the Kubernetes API for TokenReview", "err", err)
				return 1
			}
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				log.Error("kubernetes client", "err", err)
				return 1
			}
			cfg.Provider, cfg.TokenAudience, cfg.Reviewer = *provider, *tokenAudience, emulatorauth.TokenReviewer{Client: cs.AuthenticationV1()}
		}
		opts.Wrap = func(base string, storage http.Handler) (http.Handler, error) {
			cfg.BaseURL = base
			return emulatorauth.New(cfg, storage)
		}
	}
	srv, err := emulator.StartWith(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gcs-emulator:", err)
		return 1
	}
	log.Info("GCS emulator ready", "endpoint", srv.Endpoint, "buckets", bs, "auth", *auth, "tokenLifetime", lifetime.String(),
		"wifProvider", *provider, "tokenURL", srv.URL+"/token", "stsURL", srv.URL+"/sts/v1/token")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Stop()
	return 0
}

// fromNode lets the admin API answer requests from the node only: loopback or one of the
// allowed addresses (the one it listens on, and the host that runs the tests). Pods, on the
// pod network, cannot set policies or mint tokens.
func fromNode(allowed []string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		h, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return false
		}
		ip := net.ParseIP(h)
		if ip == nil {
			return false
		}
		if ip.IsLoopback() {
			return true
		}
		for _, a := range allowed {
			if a = strings.TrimSpace(a); a != "" && net.ParseIP(a).Equal(ip) {
				return true
			}
		}
		return false
	}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, err
	}
	c.Timeout = 10 * time.Second
	return c, nil
}
