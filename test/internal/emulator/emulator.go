// Package emulator runs fake-gcs-server in process as the driver's embedded GCS backend, so
// the demo and the tests talk to a real HTTP storage API without any cloud account. It adds
// what gcsfuse needs and fake-gcs-server lacks: objects.move (move.go), gcsfuse's rename; and
// a watch (watch.go) that reads each request's body before fake-gcs-server takes its one lock,
// and logs the requests that are slow or stuck.
package emulator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// shutdownTimeout bounds Stop's wait for requests in flight.
const shutdownTimeout = 2 * time.Second

// Server is a running emulator.
type Server struct {
	*fakestorage.Server
	// Endpoint is what gcsfuse's --custom-endpoint must be set to.
	Endpoint string
	// URL is the emulator's base URL (http://host:port, or https:// with Options.TLS; the
	// host is Options.PublicHost when set).
	URL   string
	http  *http.Server
	watch *watch
	done  chan struct{}
}

// Options for StartWith.
type Options struct {
	Host string
	// Port 0 picks a free one.
	Port    int
	Buckets []string
	// Wrap, if set, wraps the storage API's handler (an auth layer); it gets the base URL.
	Wrap func(baseURL string, storage http.Handler) (http.Handler, error)
	// PublicHost, if set, is the name clients reach the emulator by (a Service's DNS name,
	// a name only a proxy resolves) instead of Host; the port stays the listening one.
	PublicHost string
	// TLS, if set, serves HTTPS with it (its Certificates must cover the public host).
	TLS *tls.Config
	// Log, if set, gets the slow and stuck requests (watch.go); nil: discarded.
	Log *slog.Logger
}

// Start runs an in-memory emulator on host:port (port 0 picks a free one) with the buckets.
func Start(host string, port int, buckets ...string) (*Server, error) {
	return StartWith(Options{Host: host, Port: port, Buckets: buckets})
}

// StartWith runs an in-memory emulator as o says. The public host equals the listen
// address: gcsfuse fails reads with "stale file handle" when the emulator's advertised host
// differs from the endpoint it dialled.
func StartWith(o Options) (*Server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
	if err != nil {
		return nil, fmt.Errorf("GCS emulator: listen on %s:%d: %w", o.Host, o.Port, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	public := o.Host
	if o.PublicHost != "" {
		public = o.PublicHost
	}
	hp := net.JoinHostPort(public, strconv.Itoa(port))
	scheme := "http"
	if o.TLS != nil {
		scheme = "https"
		ln = tls.NewListener(ln, o.TLS)
	}
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme:      scheme,
		Host:        o.Host,
		Port:        uint16(port),
		PublicHost:  hp,
		ExternalURL: scheme + "://" + hp,
		NoListener:  true,
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("start GCS emulator on %s: %w", hp, err)
	}
	for _, b := range o.Buckets {
		srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: b})
	}
	base := scheme + "://" + hp
	h := withMove(srv.HTTPHandler())
	if o.Wrap != nil {
		if h, err = o.Wrap(base, h); err != nil {
			ln.Close()
			srv.Stop()
			return nil, err
		}
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	wt := newWatch(h, log, time.Now)
	s := &Server{Server: srv, Endpoint: base + "/storage/v1/", URL: base, done: make(chan struct{}), watch: wt,
		http: &http.Server{Handler: wt, ReadHeaderTimeout: 10 * time.Second}}
	go func() { // owned by s: ends when Stop closes the server
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("GCS emulator:", err)
		}
	}()
	return s, nil
}

// Stop ends the HTTP server (bounded) and the emulator.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		s.http.Close()
	}
	<-s.done
	s.watch.close()
	s.Server.Stop()
}
