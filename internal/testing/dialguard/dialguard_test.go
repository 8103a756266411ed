package dialguard

import (
	"context"
	"strings"
	"testing"
)

func TestGuard(t *testing.T) {
	g, err := New("https://10.241.0.2:6443", "http://10.241.0.2:14443")
	if err != nil {
		t.Fatal(err)
	}
	if !g.Allowed("10.241.0.2:6443") || !g.Allowed("10.241.0.2:14443") || len(g.allowed) != 2 {
		t.Errorf("allowed = %v", g.allowed)
	}
	// Refused before any packet: no listener is needed to tell.
	for _, addr := range []string{"10.241.0.2:9920", "8.8.8.8:443", "storage.googleapis.com:443"} {
		if _, err := g.DialContext(context.Background(), "tcp", addr); err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("dial %s: %v", addr, err)
		}
	}
	for raw, want := range map[string]string{"https://h": "h:443", "http://h": "h:80", "10.0.0.1:6443": "10.0.0.1:6443", "https://[::1]:6443": "[::1]:6443"} {
		if got, err := HostPort(raw); err != nil || got != want {
			t.Errorf("HostPort(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	if _, err := HostPort("ftp://h"); err == nil {
		t.Error("HostPort of a scheme without a default port")
	}
}
