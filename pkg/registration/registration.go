// Package registration registers the CSI driver with the kubelet through the kubelet's plugin
// registration API (k8s.io/kubelet/pkg/apis/pluginregistration/v1), the job usually done by
// the csi-node-driver-registrar sidecar image. Doing it in process removes one image (not
// obtainable in air-gapped or registry-less clusters) and one container per node.
//
// The protocol: the plugin listens on a unix socket in the kubelet's plugins_registry
// directory; the kubelet's plugin watcher notices the new socket, calls GetInfo to learn the
// driver name and the CSI endpoint, validates it (it dials the CSI endpoint and calls
// NodeGetInfo), then calls NotifyRegistrationStatus with the outcome. When the socket
// disappears the kubelet deregisters the driver.
package registration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// SupportedVersions are the CSI spec versions the kubelet may use with the driver.
var SupportedVersions = []string{"1.0.0"}

// Config configures a Server.
type Config struct {
	// DriverName is the CSI driver name (contract.DriverName).
	DriverName string
	// SocketPath is where the registration socket is created, normally
	// /var/lib/kubelet/plugins_registry/<driver>-reg.sock.
	SocketPath string
	// KubeletCSIEndpoint is the CSI socket path as the kubelet sees it on the host, e.g.
	// /var/lib/kubelet/plugins/<driver>/csi.sock. It differs from the path inside the node
	// plugin's container when the plugin directory is mounted elsewhere.
	KubeletCSIEndpoint string
	// Log receives registration events; nil means slog.Default().
	Log *slog.Logger
}

// Server is the kubelet plugin registration service of one driver.
type Server struct {
	registerapi.UnimplementedRegistrationServer
	cfg Config
	log *slog.Logger

	once       sync.Once
	registered chan struct{} // closed on the first successful registration
	failed     chan error    // the kubelet's first rejection
	failOnce   sync.Once
}

// New checks cfg and returns a Server; call Serve to start it.
func New(cfg Config) (*Server, error) {
	if cfg.DriverName == "" || cfg.SocketPath == "" || cfg.KubeletCSIEndpoint == "" {
		return nil, errors.New("registration: DriverName, SocketPath and KubeletCSIEndpoint are required")
	}
	if !filepath.IsAbs(cfg.KubeletCSIEndpoint) {
		// The kubelet dials the endpoint as a plain unix socket path, so a "unix://" URL
		// or a relative path would only fail later, at the first mount: fail at startup.
		return nil, fmt.Errorf("registration: kubelet CSI endpoint %q must be an absolute path", cfg.KubeletCSIEndpoint)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Server{
		cfg: cfg, log: cfg.Log.With("component", "registration"),
		registered: make(chan struct{}), failed: make(chan error, 1),
	}, nil
}

// GetInfo tells the kubelet who we are and where the CSI service listens.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	s.log.Info("kubelet asked for plugin info", "endpoint", s.cfg.KubeletCSIEndpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.cfg.DriverName,
		Endpoint:          s.cfg.KubeletCSIEndpoint,
		SupportedVersions: append([]string(nil), SupportedVersions...),
	}, nil
}

// NotifyRegistrationStatus receives the kubelet's verdict. A rejection is not retried in
// process: the kubelet only re-registers a plugin whose socket is re-created, so Serve
// returns the error and the node plugin exits; its restart re-creates the socket.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		s.log.Info("registered with the kubelet", "driver", s.cfg.DriverName)
		s.once.Do(func() { close(s.registered) })
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	err := fmt.Errorf("the kubelet rejected driver %s: %s", s.cfg.DriverName, st.Error)
	s.log.Error("registration failed", "err", err)
	s.failOnce.Do(func() { s.failed <- err })
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Registered is closed once the kubelet has accepted the driver.
func (s *Server) Registered() <-chan struct{} { return s.registered }

// Serve listens on the registration socket (replacing a stale one left by a previous run)
// and serves until ctx ends or the kubelet rejects the driver, in which case the rejection
// is returned. The socket is removed on return so the kubelet deregisters the driver
// instead of keeping a dead endpoint.
func (s *Server) Serve(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.cfg.SocketPath), 0o750); err != nil {
		return fmt.Errorf("registration: %w", err)
	}
	if err := os.Remove(s.cfg.SocketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("registration: remove stale socket: %w", err)
	}
	// The socket appears under its name only once it listens: bind(2) creates the file
	// before listen(2), and the kubelet's plugin watcher (or anyone) dialling in between
	// would be refused. So it is bound under a hidden name, which the watcher ignores, and
	// renamed into place.
	pending := filepath.Join(filepath.Dir(s.cfg.SocketPath), "."+filepath.Base(s.cfg.SocketPath)+".pending")
	if err := os.Remove(pending); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("registration: remove stale socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: pending, Net: "unix"})
	if err != nil {
		return fmt.Errorf("registration: %w", err)
	}
	ln.SetUnlinkOnClose(false) // the name moves; the socket is removed below by its final name
	if err := os.Rename(pending, s.cfg.SocketPath); err != nil {
		ln.Close()
		os.Remove(pending)
		return fmt.Errorf("registration: %w", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, s)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.log.Info("registration socket ready", "socket", s.cfg.SocketPath, "csiEndpoint", s.cfg.KubeletCSIEndpoint)

	var result error
	select {
	case <-ctx.Done():
	case result = <-s.failed:
	case err := <-served:
		result = fmt.Errorf("registration: serve: %w", err)
	}
	// Let the call in flight (the rejection itself) answer; the kubelet's calls are short,
	// so a bounded wait is enough.
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		srv.Stop()
	}
	if err := os.Remove(s.cfg.SocketPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("cannot remove registration socket", "err", err)
	}
	return result
}
