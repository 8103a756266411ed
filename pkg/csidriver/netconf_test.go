package csidriver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
)

const proxyPassword = "pr0xy-s3cret"

func testCAPEM(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corp CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// A bad proxy or CA bundle stops the node plugin at start, naming the setting and never
// showing the proxy's password.
func TestNewNodeServerValidatesProxyAndCA(t *testing.T) {
	good := Config{NodeID: "n1", KubeletRoot: root, SidecarUID: 65534, SidecarGID: 65534,
		Proxy: netconf.Proxy{HTTPS: "http://u:" + proxyPassword + "@proxy:3128", NoProxy: ".svc"}, CABundle: testCAPEM(t)}
	if _, err := NewNodeServer(good, nil, nil); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tt := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Proxy.HTTPS = "proxy:3128" }, "proxy"},
		{func(c *Config) { c.Proxy.HTTPS = "http://u:" + proxyPassword + "@proxy:3128/path" }, "HTTPS proxy http://REDACTED@proxy:3128/path"},
		{func(c *Config) { c.Proxy.HTTP = "socks4://p:1" }, "HTTP proxy"},
		{func(c *Config) { c.Proxy.NoProxy = "a b" }, "no-proxy"},
		{func(c *Config) { c.CABundle = []byte("not a certificate") }, "CA bundle"},
		{func(c *Config) { c.CABundle = []byte{} }, "CA bundle holds no PEM certificate"},
	} {
		cfg := good
		tt.mutate(&cfg)
		_, err := NewNodeServer(cfg, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error = %v, want one naming %q", err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), proxyPassword) {
			t.Errorf("the error shows the proxy's password: %v", err)
		}
	}
}

// The driver's proxy and CA reach every volume's hand-off, as version 2; without them the
// volume stays version 1, which the previous release's sidecars take.
func TestValidatePublishCarriesProxyAndCA(t *testing.T) {
	req := &csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: target, VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := Config{NodeID: "n1", KubeletRoot: root, SidecarUID: 65534, SidecarGID: 65534, GCSEndpoint: "https://gcs.corp/storage/v1/"}

	plain, err := mustNodeServer(base, nil, log).validatePublish(req)
	if err != nil {
		t.Fatal(err)
	}
	if v := plain.Volume; v.Version != handoff.Version || !v.Proxy().IsZero() || v.CABundle {
		t.Fatalf("without proxy or CA: %+v", v)
	}

	cfg := base
	cfg.Proxy = netconf.Proxy{HTTPS: "http://proxy:3128", HTTP: "http://proxy:3129", NoProxy: ".svc"}
	cfg.CABundle = testCAPEM(t)
	r, err := mustNodeServer(cfg, nil, log).validatePublish(req)
	if err != nil {
		t.Fatal(err)
	}
	v := r.Volume
	if v.Version != handoff.VersionNetwork || v.Proxy() != cfg.Proxy || !v.CABundle {
		t.Fatalf("with proxy and CA: %+v", v)
	}
	if err := v.Validate(); err != nil {
		t.Fatalf("the sidecar would refuse it: %v", err)
	}
	onlyCA := base
	onlyCA.CABundle = cfg.CABundle
	if r, err := mustNodeServer(onlyCA, nil, log).validatePublish(req); err != nil || r.Volume.Version != handoff.VersionNetwork || !r.Volume.CABundle {
		t.Fatalf("CA alone: %+v, %v", r, err)
	}
}
