package webhook

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// CertCheckInterval is how often, at most, the serving certificate's files are looked at
// again: on the first TLS handshake after it has passed. A Secret volume updates its files
// within a minute of the Secret's change (an atomic swap of its ..data link), so a rotated
// certificate is served from the next handshake on, without a restart and without a
// goroutine or a watch that could die.
const CertCheckInterval = 5 * time.Second

// certReloader serves the key pair from two files and loads them again when they change.
type certReloader struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // what the files looked like when cert was loaded
	checked time.Time
	badFor  string // the stamp last reported as a bad pair, so it is logged once
}

// newCertReloader loads the pair now: a missing or bad pair fails at start.
func newCertReloader(certFile, keyFile string, interval time.Duration, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, interval: interval, log: log}
	stamp, err := r.stampFiles()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the TLS key pair %s, %s: %w", certFile, keyFile, err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, time.Now()
	return r, nil
}

// stampFiles describes both files (size, modification time, inode), following links.
func (r *certReloader) stampFiles() (string, error) {
	s := ""
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("TLS key pair: %w", err)
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		s += fmt.Sprintf("%d/%d/%d;", fi.Size(), fi.ModTime().UnixNano(), ino)
	}
	return s, nil
}

// GetCertificate is the tls.Config hook: the current pair, loaded again first when the
// files changed since it was.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.currentLocked(), nil
}

// valid tells whether the pair served now (loaded again first if its files changed) is
// within its validity period: the webhook's readiness, so that a replica whose
// certificate expired without a rotation reaching it leaves the Service's endpoints, and
// shows as not ready, instead of failing every admission with a TLS error.
func (r *certReloader) valid(now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	leaf := r.currentLocked().Leaf
	if leaf == nil {
		return fmt.Errorf("serving certificate %s not parsed", r.certFile)
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("serving certificate %s is valid from %s to %s, not now", r.certFile,
			leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
	}
	return nil
}

// currentLocked is the current pair, loaded again first when the files changed since it
// was (looked at most once per interval). A pair that does not load (a half-written
// update, a key that does not match) is logged once and the previous one kept. r.mu held.
func (r *certReloader) currentLocked() *tls.Certificate {
	if time.Since(r.checked) < r.interval {
		return r.cert
	}
	r.checked = time.Now()
	stamp, err := r.stampFiles()
	if err != nil || stamp == r.stamp {
		if err != nil && r.badFor != err.Error() {
			r.badFor = err.Error()
			r.log.Error("cannot look at the serving certificate; serving the one loaded before", "err", err)
		}
		return r.cert
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.badFor != stamp {
			r.badFor = stamp
			r.log.Error("the serving certificate changed but does not load; serving the one loaded before", "err", err)
		}
		return r.cert
	}
	r.cert, r.stamp, r.badFor = &cert, stamp, ""
	r.log.Info("serving certificate reloaded", "cert", r.certFile)
	return r.cert
}
