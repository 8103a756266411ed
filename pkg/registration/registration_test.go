package registration

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const endpoint = "/var/lib/kubelet/plugins/gcsfuse.csi.storage/csi.sock"

// start serves a registration Server on a socket in a temp dir and returns a client the way
// the kubelet's plugin watcher connects, plus the channel Serve's result arrives on.
func start(t *testing.T, ctx context.Context) (string, registerapi.RegistrationClient, <-chan error, *Server) {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "plugins_registry", "gcsfuse.csi.storage-reg.sock")
	s, err := New(Config{DriverName: "gcsfuse.csi.storage", SocketPath: sock, KubeletCSIEndpoint: endpoint,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("registration socket never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sock, registerapi.NewRegistrationClient(conn), done, s
}

func TestGetInfo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, c, _, _ := start(t, ctx)
	info, err := c.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "gcsfuse.csi.storage" || info.Endpoint != endpoint ||
		!slices.Equal(info.SupportedVersions, []string{"1.0.0"}) {
		t.Fatalf("GetInfo = %+v", info)
	}
}

func TestRegisteredThenStopRemovesSocket(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sock, c, done, s := start(t, ctx)
	select {
	case <-s.Registered():
		t.Fatal("Registered closed before the kubelet said so")
	default:
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Registered():
	case <-time.After(5 * time.Second):
		t.Fatal("Registered not closed after a successful registration")
	}
	// A second notification (kubelet restart) must not panic on the closed channel.
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind after Serve returned: %v", err)
	}
}

func TestRejectionEndsServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock, c, done, _ := start(t, ctx)
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "version 9.9 unsupported"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "version 9.9 unsupported") {
			t.Fatalf("Serve = %v, want the kubelet's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the kubelet rejected the driver")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind after a rejection: %v", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	dir, err := os.MkdirTemp("", "reg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "reg.sock")
	if err := os.WriteFile(sock, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{DriverName: "d", SocketPath: sock, KubeletCSIEndpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		fi, err := os.Stat(sock)
		if err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("stale file not replaced by a socket: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{SocketPath: "/s", KubeletCSIEndpoint: endpoint},
		{DriverName: "d", KubeletCSIEndpoint: endpoint},
		{DriverName: "d", SocketPath: "/s"},
		{DriverName: "d", SocketPath: "/s", KubeletCSIEndpoint: "unix:///csi/csi.sock"},
		{DriverName: "d", SocketPath: "/s", KubeletCSIEndpoint: "csi.sock"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
