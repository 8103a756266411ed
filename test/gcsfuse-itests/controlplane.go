package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// What gcsfuse's test packages reach besides the storage JSON API, which
// STORAGE_EMULATOR_HOST points at the emulator:
//
//   - every package's TestMain asks the Storage Control API (gRPC, at
//     storage.googleapis.com:443, which no environment variable moves) for the bucket's
//     storage layout, to tell flat, HNS and zonal buckets apart, and exits when it cannot;
//     fake-gcs-server has no Storage Control API.
//   - their storage client authenticates with Application Default Credentials even when
//     STORAGE_EMULATOR_HOST is set (it brings its own HTTP client), so credentials must exist.
//
// controlPlane answers both on loopback, leaving the tests unmodified: an HTTP CONNECT proxy
// (HTTPS_PROXY; gRPC honours it) that takes only storage.googleapis.com:443 to a gRPC server
// with a certificate for that name from a CA of its own (SSL_CERT_FILE), which answers
// GetStorageLayout with a flat bucket's layout and Unimplemented for everything else; and a
// service account key (GOOGLE_APPLICATION_CREDENTIALS) whose token_uri is its own token
// endpoint, which grants any JWT a token the emulator ignores.
type controlPlane struct {
	caFile, credFile string
	proxyURL         string
	web              *http.Server
	grpc             *grpc.Server
	grpcAddr         string

	mu      sync.Mutex
	refused []string // CONNECT targets it refused, for the report
	layouts int      // GetStorageLayout calls answered
}

const (
	controlHost = "storage.googleapis.com"
	// getStorageLayout is the one Storage Control method the test packages call.
	getStorageLayout = "/google.storage.control.v2.StorageControl/GetStorageLayout"
)

// startControlPlane starts it; dir receives the CA certificate and the credentials file.
// credFile, when not empty, is a service account key to use instead of its own (one whose
// token_uri is an emulator's token endpoint, for buckets behind emulatorauth policies).
func startControlPlane(dir, credFile string) (*controlPlane, error) {
	c := &controlPlane{caFile: filepath.Join(dir, "control-plane-ca.pem")}
	caPEM, leaf, err := selfSignedFor(controlHost)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.caFile, caPEM, 0o644); err != nil {
		return nil, err
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.grpcAddr = gl.Addr().String()
	c.grpc = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS12})),
		grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(c.handle))
	go func() { _ = c.grpc.Serve(gl) }() // ends with close

	wl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.grpc.Stop()
		return nil, err
	}
	base := "http://" + wl.Addr().String()
	c.proxyURL = base
	c.web = &http.Server{Handler: http.HandlerFunc(c.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.web.Serve(wl) }() // ends with close

	c.credFile = credFile
	if c.credFile == "" {
		c.credFile = filepath.Join(dir, "service-account.json")
		key, err := serviceAccountKey(base + "/token")
		if err == nil {
			err = os.WriteFile(c.credFile, key, 0o600)
		}
		if err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// env is what a test binary needs to find it. noProxy lists the hosts it must reach
// directly (the emulator's).
func (c *controlPlane) env(noProxy ...string) []string {
	np := "127.0.0.1,localhost"
	for _, h := range noProxy {
		np += "," + h
	}
	return []string{
		"HTTPS_PROXY=" + c.proxyURL, "https_proxy=" + c.proxyURL,
		"NO_PROXY=" + np, "no_proxy=" + np,
		"SSL_CERT_FILE=" + c.caFile,
		"GOOGLE_APPLICATION_CREDENTIALS=" + c.credFile,
	}
}

func (c *controlPlane) close() {
	if c.web != nil {
		_ = c.web.Close()
	}
	if c.grpc != nil {
		c.grpc.Stop()
	}
}

// refusedTargets returns (and forgets) the CONNECT targets refused since the last call.
func (c *controlPlane) refusedTargets() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.refused
	c.refused = nil
	return r
}

func (c *controlPlane) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		c.connect(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/token":
		// The JWT grant of the service account key; the emulator ignores the token.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "gcsfuse-itests", "token_type": "Bearer", "expires_in": 3600})
	default:
		http.NotFound(w, r)
	}
}

// connect tunnels a CONNECT to the gRPC server when it asks for the Storage Control API's
// host, and refuses anything else (noted for the report: a test reaching for another Google
// API is an emulator gap to name).
func (c *controlPlane) connect(w http.ResponseWriter, r *http.Request) {
	if r.Host != controlHost+":443" {
		c.mu.Lock()
		c.refused = append(c.refused, r.Host)
		c.mu.Unlock()
		http.Error(w, "gcsfuse-itests: only "+controlHost+":443 is emulated", http.StatusForbidden)
		return
	}
	up, err := net.DialTimeout("tcp", c.grpcAddr, 5*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "no hijacking", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		up.Close()
		down.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, buf); done <- struct{}{} }() // ends when either side closes
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done
	up.Close()
	down.Close()
	<-done
}

// handle answers GetStorageLayout with a flat, multi-region bucket's layout, named as asked;
// every other Storage Control method is Unimplemented (the message names it).
func (c *controlPlane) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	if method != getStorageLayout {
		return status.Errorf(codes.Unimplemented, "gcsfuse-itests emulates only GetStorageLayout of the Storage Control API, not %s", method)
	}
	var req []byte
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	name, err := protoString(req, 1) // GetStorageLayoutRequest.name
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "GetStorageLayoutRequest: %v", err)
	}
	c.mu.Lock()
	c.layouts++
	c.mu.Unlock()
	return stream.SendMsg(storageLayout(name))
}

// storageLayout encodes a StorageLayout (google.storage.control.v2): name = 1, location = 2,
// location_type = 3; no hierarchical_namespace (5) and no rapid_cache_info (6) make it flat.
func storageLayout(name string) *[]byte {
	var b []byte
	for _, f := range []struct {
		num protowire.Number
		s   string
	}{{1, name}, {2, "US"}, {3, "multi-region"}} {
		b = protowire.AppendTag(b, f.num, protowire.BytesType)
		b = protowire.AppendString(b, f.s)
	}
	return &b
}

// protoString returns the string field num of an encoded message ("" if absent).
func protoString(b []byte, num protowire.Number) (string, error) {
	out := ""
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return "", protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeString(b)
			if l < 0 {
				return "", protowire.ParseError(l)
			}
			out, b = v, b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return "", protowire.ParseError(l)
		}
		b = b[l:]
	}
	return out, nil
}

// rawCodec passes messages through as bytes: the control plane needs no generated types.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// selfSignedFor makes a CA (returned as PEM, for SSL_CERT_FILE) and a certificate for host
// signed by it.
func selfSignedFor(host string) ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gcsfuse-itests control plane CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return caPEM, tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}, nil
}

// serviceAccountKey makes a service account key file (a fresh RSA key) whose token_uri is
// tokenURI.
func serviceAccountKey(tokenURI string) ([]byte, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(map[string]string{
		"type":           "service_account",
		"project_id":     "gcsfuse-itests",
		"private_key_id": "gcsfuse-itests",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   "gcsfuse-itests@gcsfuse-itests.iam.gserviceaccount.com",
		"client_id":      "1",
		"token_uri":      tokenURI,
	}, "", "  ")
}
