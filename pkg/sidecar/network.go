package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// DefaultSystemRoots is the system's CA bundle in the sidecar image (build/sidecar).
const DefaultSystemRoots = "/etc/ssl/certs/ca-certificates.crt"

// route is how one volume reaches its endpoint: the driver's proxy and, with an extra CA
// bundle, the file that holds the system's roots and it. gcsfuse gets them in its
// environment (env); the sidecar's own requests (the bucket check, its access token) go
// the same way through client, so that they fail or pass as gcsfuse's would.
type route struct {
	proxy netconf.Proxy
	// bundle is the combined CA file ("" without an extra CA: the system's roots).
	bundle string
	client *http.Client
}

// env is what gcsfuse's environment adds for r: the proxy variables and SSL_CERT_FILE, which
// Go's crypto/x509 reads on Linux instead of the system's bundle file.
func (r *route) env() []string {
	env := r.proxy.Env()
	if r.bundle != "" {
		env = append(env, "SSL_CERT_FILE="+r.bundle)
	}
	return env
}

// via says, for a message, which proxy a request to the endpoint goes through ("" none).
func (r *route) via(req *http.Request) string {
	if p := r.proxy.For(req.URL); p != "" {
		return " through proxy " + p
	}
	return ""
}

// close drops the client's idle connections: the route serves one check.
func (r *route) close() { r.client.CloseIdleConnections() }

// routeFor prepares v's route. With v.CABundle it reads the extra bundle the node plugin
// wrote (podfiles.Paths.CABundleFile), checks it, and writes the system's roots (systemRoots;
// none if the file is missing) followed by it to podfiles.Paths.CombinedCAFile, in the
// volume's own directory, which only this user reads.
func routeFor(v *handoff.Volume, tmpDir, systemRoots string) (*route, error) {
	r := &route{proxy: v.Proxy()}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	proxyFor := r.proxy.Func()
	tr.Proxy = func(req *http.Request) (*url.URL, error) { return proxyFor(req.URL) }
	if v.CABundle {
		paths := podfiles.At(tmpDir)
		extraPath := paths.CABundleFile(v.VolumeName)
		extra, err := readBounded(extraPath, netconf.MaxCABundle)
		if err != nil {
			return nil, fmt.Errorf("the driver's CA bundle for volume %s: %w", v.VolumeName, err)
		}
		if _, err := netconf.ParseCABundle(extra); err != nil {
			return nil, fmt.Errorf("the driver's CA bundle for volume %s (%s): %w", v.VolumeName, extraPath, err)
		}
		system, err := readBounded(systemRoots, 16<<20)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("the system's CA bundle: %w", err)
		}
		combined := netconf.Combine(system, extra)
		if err := os.MkdirAll(paths.VolumeDir(v.VolumeName), 0o700); err != nil {
			return nil, fmt.Errorf("create the directory of volume %s: %w", v.VolumeName, err)
		}
		r.bundle = paths.CombinedCAFile(v.VolumeName)
		if err := writeAtomic(r.bundle, combined); err != nil {
			return nil, fmt.Errorf("write the CA bundle of volume %s: %w", v.VolumeName, err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(combined)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	r.client = &http.Client{Transport: tr}
	return r, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// writeAtomic writes data to path through a temp file and a rename, mode 0600: a gcsfuse
// that starts meanwhile reads the old bundle or the new one, never half of one.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
