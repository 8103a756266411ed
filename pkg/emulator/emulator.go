// Package emulator runs fake-gcs-server in process as the driver's embedded GCS backend, so
// the demo and the tests talk to a real HTTP storage API without any cloud account.
package emulator

import (
	"fmt"
	"net"
	"strconv"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

// Server is a running emulator.
type Server struct {
	*fakestorage.Server
	// Endpoint is what gcsfuse's --custom-endpoint must be set to.
	Endpoint string
}

// Start runs an in-memory emulator on host:port (port 0 picks a free one) with the buckets.
// The public host equals the listen address: gcsfuse fails reads with "stale file handle"
// when the emulator's advertised host differs from the endpoint it dialled.
func Start(host string, port int, buckets ...string) (*Server, error) {
	if port == 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	hp := net.JoinHostPort(host, strconv.Itoa(port))
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme:      "http",
		Host:        host,
		Port:        uint16(port),
		PublicHost:  hp,
		ExternalURL: "http://" + hp,
		NoListener:  false,
	})
	if err != nil {
		return nil, fmt.Errorf("start GCS emulator on %s: %w", hp, err)
	}
	for _, b := range buckets {
		srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: b})
	}
	return &Server{Server: srv, Endpoint: "http://" + hp + "/storage/v1/"}, nil
}
