// Package csidriver implements the CSI Identity and Node services of the gcsfuse driver and
// serves them over gRPC on a unix socket. One file per CSI service.
package csidriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Listen parses a CSI endpoint ("unix:///csi/csi.sock" or a plain path), removes a stale
// socket left by a previous run, and listens on it.
func Listen(endpoint string) (net.Listener, error) {
	path := endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || u.Scheme != "unix" {
			return nil, fmt.Errorf("CSI endpoint %q: only unix:// endpoints are supported", endpoint)
		}
		path = u.Path
		if u.Host != "" {
			path = u.Host + u.Path
		}
	}
	if path == "" {
		return nil, fmt.Errorf("CSI endpoint %q has no path", endpoint)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale CSI socket %s: %w", path, err)
	}
	return net.Listen("unix", path)
}

// NewGRPCServer returns a gRPC server with both services registered and every call logged
// with its method, duration and status code. Requests are not logged: NodePublishVolume
// carries secrets (service account tokens) in its volume context.
func NewGRPCServer(ids csi.IdentityServer, ns csi.NodeServer, log *slog.Logger) *grpc.Server {
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		lvl := slog.LevelDebug
		if err != nil {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, "csi call", "method", info.FullMethod, "code", status.Code(err).String(),
			"ms", time.Since(start).Milliseconds(), "err", err)
		return resp, err
	}))
	csi.RegisterIdentityServer(srv, ids)
	csi.RegisterNodeServer(srv, ns)
	return srv
}
