// Package dialguard keeps a benchmark's connections on the local cluster: a Guard dials only
// the addresses it was given (the API server's, the emulator's), and a client-go config it
// is applied to never uses a proxy. The cluster lives on its own veth (hack/cluster-lib.sh);
// nothing a benchmark does has a reason to reach anything else, least of all load.
package dialguard

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Guard lets a program connect only to the addresses it was built with.
type Guard struct {
	allowed map[string]bool
	d       net.Dialer
}

// New builds a Guard allowing the host:port of each URL (the scheme's port when it names
// none).
func New(urls ...string) (*Guard, error) {
	g := &Guard{allowed: map[string]bool{}}
	for _, raw := range urls {
		addr, err := HostPort(raw)
		if err != nil {
			return nil, err
		}
		g.allowed[addr] = true
	}
	return g, nil
}

// HostPort is the address a client dials for raw, a URL: its host and port, the scheme's
// port when it names none.
func HostPort(raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw // a kubeconfig's server may omit the scheme: client-go's default
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("address of %q: not a URL with a host", raw)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	switch u.Scheme {
	case "https":
		return net.JoinHostPort(u.Hostname(), "443"), nil
	case "http":
		return net.JoinHostPort(u.Hostname(), "80"), nil
	}
	return "", fmt.Errorf("address of %q: no port and scheme %q", raw, u.Scheme)
}

// Allowed reports whether addr (host:port) may be dialled.
func (g *Guard) Allowed(addr string) bool { return g.allowed[addr] }

// DialContext dials addr when it is allowed, and refuses it before any packet otherwise.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if !g.allowed[addr] {
		return nil, fmt.Errorf("refusing to connect to %s: only the local cluster's API server, emulator and the run's own listeners are reached", addr)
	}
	return g.d.DialContext(ctx, network, addr)
}

// Apply makes cfg dial through g and never through a proxy from the environment.
func (g *Guard) Apply(cfg *rest.Config) {
	cfg.Dial = g.DialContext
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
}

// ClientConfig is the client configuration of kubeconfig's cluster for a benchmark: dialling
// only its API server and the others given (URLs), through no proxy, at qps and burst.
func ClientConfig(kubeconfig string, qps float32, burst int, others ...string) (*rest.Config, *Guard, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	g, err := New(append([]string{cfg.Host}, others...)...)
	if err != nil {
		return nil, nil, err
	}
	g.Apply(cfg)
	cfg.QPS, cfg.Burst = qps, burst
	return cfg, g, nil
}
