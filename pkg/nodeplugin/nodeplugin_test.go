package nodeplugin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/containerexittest"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/testpki"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitcoord"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
)

// minimal is a Config that runs without root, a runtime or an API server.
func minimal(t *testing.T) Config {
	dir := t.TempDir()
	return Config{
		Endpoint: "unix://" + filepath.Join(dir, "csi.sock"), NodeID: "node-a", KubeletRoot: dir, DriverName: contract.DriverName,
		StateDir: "-", RuntimeEvents: "auto", MachineType: MachineTypeLookup, Version: "test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// A configuration the plugin cannot run with is refused by New as ErrInvalidConfig (the
// command exits 2), before anything serves.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	for name, bad := range map[string]func(*Config){
		"no node":               func(c *Config) { c.NodeID = "" },
		"no endpoint":           func(c *Config) { c.Endpoint = "" },
		"no kubelet root":       func(c *Config) { c.KubeletRoot = "" },
		"no logger":             func(c *Config) { c.Log = nil },
		"driver name":           func(c *Config) { c.DriverName = "x.example.com" },
		"runtime events":        func(c *Config) { c.RuntimeEvents = "sometimes" },
		"shared ADC namespaces": func(c *Config) { c.SharedADCNamespaces = "Not_A_Namespace" },
		"CA bundle missing":     func(c *Config) { c.CABundleFile = "/nonexistent/ca.pem" },
	} {
		c := minimal(t)
		bad(&c)
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", name, err)
		}
	}
}

// A node-wide identity provider needs the pods' service account tokens: with a token
// audience (the CSIDriver's tokenRequests) the plugin starts; without one it is refused,
// naming the audience, instead of waiting at every publish for a token the kubelet never
// passes.
func TestProviderNeedsATokenAudience(t *testing.T) {
	const provider = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-a/providers/prov-a"
	c := minimal(t)
	c.WIFProvider, c.WIFTokenAudience = provider, contract.TokenAudience
	p, err := New(c)
	if err != nil {
		t.Fatalf("a provider with a token audience: %v", err)
	}
	p.close()
	c = minimal(t)
	c.WIFProvider = provider
	if _, err := New(c); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "token audience is empty") {
		t.Errorf("a provider without a token audience: %v, want ErrInvalidConfig naming the empty audience", err)
	}
}

// A CA bundle is refused when it is bigger than netconf.MaxCABundle, not read up to the
// limit and the rest ignored: a valid certificate padded one byte past the limit is refused
// naming the limit, and the same bundle within it is accepted.
func TestCABundleOverTheLimitRefused(t *testing.T) {
	pki, err := testpki.Issue("ca", "localhost", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size int
		ok   bool
	}{{netconf.MaxCABundle, true}, {netconf.MaxCABundle + 1, false}} {
		c := minimal(t)
		c.CABundleFile = filepath.Join(t.TempDir(), "ca.pem")
		b := append(append([]byte{}, pki.CAPEM...), bytes.Repeat([]byte("\n"), tc.size-len(pki.CAPEM))...)
		if err := os.WriteFile(c.CABundleFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := New(c)
		if tc.ok {
			if err != nil {
				t.Errorf("a %d-byte bundle: %v", tc.size, err)
			} else {
				p.close()
			}
		} else if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "limit") {
			t.Errorf("a %d-byte bundle (limit %d): %v, want ErrInvalidConfig naming the limit", tc.size, netconf.MaxCABundle, err)
		}
	}
}

// The parts stop in the order that keeps a stopping follower's Event: the node service,
// the exit coordinator, the Events' broadcaster, the runtime's client.
func TestPartsStopInOrder(t *testing.T) {
	p := &Plugin{node: &csidriver.NodeServer{}, coordinator: &exitcoord.ExitCoordinator{}, stopEvents: func() {}, runtime: io.NopCloser(nil)}
	var names []string
	for _, x := range p.parts() {
		names = append(names, x.name)
	}
	if want := []string{"node service", "exit coordinator", "events", "runtime"}; !slices.Equal(names, want) {
		t.Errorf("close stops %q, want %q", names, want)
	}
	if n := len((&Plugin{}).parts()); n != 0 {
		t.Errorf("a plugin New never finished stops %d parts, want none", n)
	}
}

// The composed plugin serves the CSI services on its endpoint until its context ends, then
// returns nil.
func TestRunServesUntilTheContextEnds(t *testing.T) {
	c := minimal(t)
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	conn, err := grpc.NewClient(c.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(waitBound)
	var info *csi.GetPluginInfoResponse
	for {
		callCtx, callCancel := context.WithTimeout(ctx, time.Second)
		info, err = csi.NewIdentityClient(conn).GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{})
		callCancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || info.GetName() != contract.DriverName || info.GetVendorVersion() != "test" {
		t.Fatalf("GetPluginInfo: %v, %v", info, err)
	}
	id, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || id.GetNodeId() != "node-a" {
		t.Fatalf("NodeGetInfo: %v, %v", id, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after its context ended: %v", err)
		}
	case <-time.After(waitBound):
		t.Fatal("Run did not return after its context ended")
	}
}

// The offers are recorded under the driver's plugin directory unless --state-dir says
// otherwise, and nowhere with "-".
func TestOfferDir(t *testing.T) {
	for stateDir, want := range map[string]string{
		"-":      "",
		"":       "/var/lib/kubelet/plugins/" + contract.DriverName + "/offers",
		"/state": "/state",
	} {
		c := Config{KubeletRoot: "/var/lib/kubelet", DriverName: contract.DriverName, StateDir: stateDir}
		if got := c.offerDir(); got != want {
			t.Errorf("offerDir with --state-dir=%q = %q, want %q", stateDir, got, want)
		}
	}
}

// A critical part that fails (here the metrics server, whose address is taken) ends Run
// with its error: the command exits 1 and the DaemonSet restarts it.
func TestRunReturnsAFailedComponentsError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	c := minimal(t)
	c.MetricsAddr = busy.Addr().String() // the metrics server cannot listen
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "component ended") {
			t.Fatalf("Run = %v, want the metrics server's error", err)
		}
	case <-time.After(waitBound):
		t.Fatal("Run kept serving after a critical component failed")
	}
}

// The kubelet's view of the CSI socket defaults to <kubelet-root>/plugins/<driver>/csi.sock;
// a registrar that cannot work with what it is given (a relative endpoint) is a
// configuration error (exit 2), found at start.
func TestKubeletCSIEndpoint(t *testing.T) {
	c := minimal(t)
	if err := c.validate(); err != nil || c.KubeletCSIEndpoint != filepath.Join(c.KubeletRoot, "plugins", contract.DriverName, "csi.sock") {
		t.Errorf("default kubelet CSI endpoint %q (%v)", c.KubeletCSIEndpoint, err)
	}
	c = minimal(t)
	c.RegistrationSocket, c.KubeletCSIEndpoint = filepath.Join(t.TempDir(), "reg.sock"), "csi.sock"
	if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a relative kubelet CSI endpoint: %v, want ErrInvalidConfig", err)
	}
}

// Run recovers what the previous node plugin left before it serves (an offer record it
// cannot use is removed), and at its stop removes the shared directory nothing uses.
func TestRunRecoversAtStartAndCleansUpAtStop(t *testing.T) {
	c := minimal(t)
	c.StateDir = filepath.Join(t.TempDir(), "offers")
	// The shared directory is given to the sidecar's uid (contract.SidecarUID): root only.
	shared := os.Geteuid() == 0
	if shared {
		c.SharedDir = filepath.Join(t.TempDir(), "shared")
	} else {
		t.Log("not root: the shared directory's clean-up is not checked (New gives it to the sidecar's uid)")
	}
	if err := os.MkdirAll(c.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(c.StateDir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.SharedDir); shared && err != nil {
		t.Fatalf("no shared directory after New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run recovers, serves and stops at once
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unusable offer record is still there: %v", err)
	}
	if _, err := os.Stat(c.SharedDir); shared && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unused shared directory is still there after Run: %v", err)
	}
}

// An endpoint Run cannot listen on ends it with an error naming the endpoint.
func TestRunFailsOnAnEndpointItCannotListenOn(t *testing.T) {
	c := minimal(t)
	c.Endpoint = "unix://" + filepath.Join(t.TempDir(), "missing-dir", "csi.sock")
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err == nil || !strings.Contains(err.Error(), c.Endpoint) {
		t.Fatalf("Run = %v, want an error naming %s", err, c.Endpoint)
	}
}

// goUntil runs f in its own goroutine when on, and its channel closes once f returned; off,
// f never runs and the channel is closed at once.
func TestGoUntil(t *testing.T) {
	p := &Plugin{}
	ran := make(chan struct{})
	release := make(chan struct{})
	done := p.goUntil(true, func() { close(ran); <-release })
	select {
	case <-ran:
	case <-time.After(waitBound):
		t.Fatal("f never ran")
	}
	select {
	case <-done:
		t.Fatal("done closed before f returned")
	default:
	}
	close(release)
	select {
	case <-done:
	case <-time.After(waitBound):
		t.Fatal("done not closed after f returned")
	}
	off := p.goUntil(false, func() { t.Error("f ran although off") })
	select {
	case <-off:
	default:
		t.Fatal("off: the channel is not closed at once")
	}
}

// With a container runtime endpoint the exit coordinator follows pods through its watch
// (and close releases the client); without one it has no runtime; an endpoint it cannot
// use is refused at start.
func TestNewConnectsTheRuntime(t *testing.T) {
	srv := containerexittest.NewServer(t)
	c := minimal(t)
	c.RuntimeEndpoint = srv.Endpoint
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	if p.runtime == nil || p.rtWatch == nil || p.coordinator.Runtime != p.rtWatch || p.criEndpoint != srv.Endpoint {
		t.Errorf("with a runtime endpoint: runtime %v, watch %v, coordinator's runtime %v, endpoint %q", p.runtime, p.rtWatch, p.coordinator.Runtime, p.criEndpoint)
	}
	var names []string
	for _, x := range p.parts() {
		names = append(names, x.name)
	}
	if !slices.Contains(names, "runtime") {
		t.Errorf("close stops %q, not the runtime's client", names)
	}

	none, err := New(minimal(t))
	if err != nil {
		t.Fatal(err)
	}
	defer none.close()
	if none.runtime != nil || none.rtWatch != nil || none.coordinator.Runtime != nil {
		t.Errorf("without a runtime endpoint: runtime %v, watch %v, coordinator's runtime %v", none.runtime, none.rtWatch, none.coordinator.Runtime)
	}

	c = minimal(t)
	c.RuntimeEndpoint = "tcp://127.0.0.1:1"
	if _, err := New(c); err == nil || !strings.Contains(err.Error(), "tcp://127.0.0.1:1") {
		t.Errorf("New with a tcp runtime endpoint = %v, want an error naming it", err)
	}
}
