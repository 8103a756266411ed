package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Paths served by the webhook.
const (
	PathInject  = "/inject"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

// NewMux routes PathInject to inject and serves the probes. /healthz answers 200 while the
// process serves; /readyz answers 200 only once ready returns true (for example once the
// node cache has synced), so no admission is answered with half-known cluster versions.
func NewMux(inject http.Handler, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(PathInject, inject)
	mux.HandleFunc(PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc(PathReadyz, func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// ServerConfig configures the HTTPS server.
type ServerConfig struct {
	// Addr is the listen address, for example ":9443".
	Addr string
	// CertFile and KeyFile are the PEM serving certificate and key.
	CertFile, KeyFile string
	// ShutdownTimeout bounds the graceful shutdown; in-flight requests are cut after it.
	ShutdownTimeout time.Duration
	// CertCheckInterval is how often, at most, the key pair's files are checked for a
	// rotation; zero means CertCheckInterval.
	CertCheckInterval time.Duration
	// ShutdownDelay is how long the server keeps serving, not ready, after it is told to
	// stop and before it stops accepting (see DefaultShutdownDelay); zero: none.
	ShutdownDelay time.Duration
}

// DefaultShutdownDelay is how long a stopping webhook keeps answering admissions. The API
// server reaches the webhook through its Service's ClusterIP, and the Service proxy on its
// host (kube-proxy's iptables rules) drops a terminating pod's address a moment after the
// pod is deleted (endpoint slice update, then its next sync, about 1 s apart on an idle
// cluster, more on a loaded one). A replica that stopped accepting at once would refuse the
// admissions still routed to it, and with failurePolicy Fail the pods being created would
// be refused: a rolling update or a drain would block pod creation. 5 s covers that lag;
// the pod's terminationGracePeriodSeconds must exceed it plus ShutdownTimeout.
const DefaultShutdownDelay = 5 * time.Second

// Server is the webhook's HTTPS server.
type Server struct {
	cfg   ServerConfig
	srv   *http.Server
	log   *slog.Logger
	certs *certReloader
	// draining is set once the server was told to stop: it is no longer ready.
	draining atomic.Bool

	mu         sync.Mutex
	notReadyBy string // the last reason Ready logged, so that it is logged once
}

// NewServer loads the certificate now, so a missing or bad key pair fails at startup rather
// than at the first TLS handshake; a rotated pair is served from the first handshake after
// its files change (see CertCheckInterval).
func NewServer(cfg ServerConfig, handler http.Handler, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.CertCheckInterval < 0 || cfg.ShutdownDelay < 0 {
		return nil, fmt.Errorf("negative certificate check interval %s or shutdown delay %s", cfg.CertCheckInterval, cfg.ShutdownDelay)
	}
	if cfg.CertCheckInterval == 0 {
		cfg.CertCheckInterval = CertCheckInterval
	}
	certs, err := newCertReloader(cfg.CertFile, cfg.KeyFile, cfg.CertCheckInterval, log)
	if err != nil {
		return nil, err
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 20 * time.Second
	}
	s := &Server{cfg: cfg, log: log, certs: certs}
	s.srv = &http.Server{
		Addr:    cfg.Addr,
		Handler: s.closeWhileDraining(handler),
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: certs.GetCertificate,
		},
		// The API server's webhook timeout is at most 30s; nothing legitimate is slower.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// closeWhileDraining answers every request of a stopping server with "Connection: close".
// The API server calls webhooks over HTTP/1.1 keep-alive connections, which outlive the
// Service's switch to other replicas, and it never retries an admission whose connection
// was closed under it (EOF fails the pod's create with failurePolicy Fail). Closing idle
// connections at Shutdown races with the API server reusing them; a connection closed right
// after a response is one the API server knows not to reuse. So during ShutdownDelay each
// connection still in use is retired after its next answer, and Shutdown finds none hot.
func (s *Server) closeWhileDraining(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// Ready tells whether the server should receive admissions (the webhook's /readyz): its
// serving certificate is loaded and valid now, and it is not shutting down. A reason for
// not being ready is logged once, when it starts.
func (s *Server) Ready() bool {
	reason := ""
	if s.draining.Load() {
		reason = "shutting down"
	} else if err := s.certs.valid(time.Now()); err != nil {
		reason = err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason != s.notReadyBy && reason != "" {
		s.log.Warn("not ready", "reason", reason)
	}
	s.notReadyBy = reason
	return reason == ""
}

// ListenAndServe listens on the configured address and serves until ctx is done.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves HTTPS on ln until ctx is done, then shuts down gracefully: it turns not
// ready and keeps serving for ShutdownDelay, stops accepting, lets in-flight admissions
// finish for up to ShutdownTimeout, and returns once the serving goroutine has exited. It
// closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.log.Info("serving", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- s.srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	if s.cfg.ShutdownDelay > 0 {
		s.log.Info("stopping: serving, not ready, until the Service drops this replica", "delay", s.cfg.ShutdownDelay.String())
		select {
		case err := <-errc:
			return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
		case <-time.After(s.cfg.ShutdownDelay):
		}
	}
	s.log.Info("shutting down", "timeout", s.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	shutdownErr := s.srv.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	if shutdownErr != nil {
		_ = s.srv.Close()
		return fmt.Errorf("graceful shutdown: %w", shutdownErr)
	}
	return nil
}
