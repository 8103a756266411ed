package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// The way a test binary reaches it: a CONNECT through the proxy to storage.googleapis.com:443,
// TLS verified against the CA file, GetStorageLayout answered with a flat bucket's layout.
func TestControlPlaneAnswersGetStorageLayout(t *testing.T) {
	cp, err := startControlPlane(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer cp.close()
	env := map[string]string{}
	for _, kv := range cp.env("10.0.0.1") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if !strings.Contains(env["NO_PROXY"], "10.0.0.1") || env["HTTPS_PROXY"] != cp.proxyURL {
		t.Errorf("env %v", env)
	}
	pemBytes, err := os.ReadFile(env["SSL_CERT_FILE"])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		t.Fatal("no certificate in SSL_CERT_FILE")
	}
	conn, err := grpc.NewClient("passthrough:///"+controlHost+":443",
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: controlHost})),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return connectVia(ctx, cp.proxyURL, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := "projects/_/buckets/b1/storageLayout"
	req := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), name)
	var resp []byte
	if err := conn.Invoke(ctx, getStorageLayout, &req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatalf("GetStorageLayout: %v", err)
	}
	for num, want := range map[protowire.Number]string{1: name, 2: "US", 3: "multi-region"} {
		if got, err := protoString(resp, num); err != nil || got != want {
			t.Errorf("field %d = %q (%v), want %q", num, got, err, want)
		}
	}
	for _, num := range []protowire.Number{5, 6} { // hierarchical_namespace, rapid_cache_info
		if hasField(resp, num) {
			t.Errorf("field %d set: the bucket would not be flat", num)
		}
	}
	err = conn.Invoke(ctx, "/google.storage.control.v2.StorageControl/CreateFolder", &req, &resp, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "CreateFolder") {
		t.Errorf("CreateFolder: %v, want Unimplemented naming it", err)
	}
}

func hasField(b []byte, num protowire.Number) bool {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		if n == num {
			return true
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return false
		}
		b = b[l:]
	}
	return false
}

// connectVia opens a tunnel to addr through an HTTP CONNECT proxy.
func connectVia(ctx context.Context, proxy, addr string) (net.Conn, error) {
	u, err := url.Parse(proxy)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %s", addr, resp.Status)
	}
	return c, nil
}

// Anything but the Storage Control API is refused, and remembered for the report.
func TestControlPlaneRefusesOtherHosts(t *testing.T) {
	cp, err := startControlPlane(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer cp.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := connectVia(ctx, cp.proxyURL, "oauth2.googleapis.com:443"); err == nil {
		c.Close()
		t.Fatal("CONNECT to oauth2.googleapis.com succeeded")
	}
	if got := cp.refusedTargets(); len(got) != 1 || got[0] != "oauth2.googleapis.com:443" {
		t.Errorf("refused %q", got)
	}
	if got := cp.refusedTargets(); len(got) != 0 {
		t.Errorf("refusedTargets did not forget: %q", got)
	}
}

// The credentials are a service account key whose token endpoint is the control plane's,
// and that endpoint grants a token.
func TestControlPlaneCredentials(t *testing.T) {
	cp, err := startControlPlane(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer cp.close()
	b, err := os.ReadFile(cp.credFile)
	if err != nil {
		t.Fatal(err)
	}
	var key map[string]string
	if err := json.Unmarshal(b, &key); err != nil {
		t.Fatal(err)
	}
	if key["type"] != "service_account" || !strings.Contains(key["private_key"], "PRIVATE KEY") || key["token_uri"] != cp.proxyURL+"/token" {
		t.Fatalf("key file %v", key)
	}
	resp, err := http.Post(key["token_uri"], "application/x-www-form-urlencoded", strings.NewReader("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=x"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok["access_token"] == "" || tok["token_type"] != "Bearer" {
		t.Errorf("token response %v (%v)", tok, err)
	}
	// A key given by the caller is used as is.
	cp2, err := startControlPlane(t.TempDir(), "/given/key.json")
	if err != nil {
		t.Fatal(err)
	}
	defer cp2.close()
	if !strings.Contains(strings.Join(cp2.env(), " "), "GOOGLE_APPLICATION_CREDENTIALS=/given/key.json") {
		t.Errorf("env %q", cp2.env())
	}
}
