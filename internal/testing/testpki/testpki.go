// Package testpki makes the certificates tests need: a CA of their own and a server
// certificate it signed, so that a TLS path is checked against a trust root the test
// controls (a private CA as teams behind a proxy run), never against the system's.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Issued is a CA and a server certificate it signed, in PEM.
type Issued struct {
	CAPEM, CertPEM, KeyPEM []byte
}

// TLSCertificate is the server certificate and key, for a tls.Config.
func (i Issued) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(i.CertPEM, i.KeyPEM)
}

// Issue makes a CA named caName and a server certificate for host (its only DNS name, or
// IP address) signed by it, both valid from an hour ago for validFor.
func Issue(caName, host string, validFor time.Duration) (Issued, error) {
	notBefore, notAfter := time.Now().Add(-time.Hour), time.Now().Add(validFor)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, fmt.Errorf("CA key: %w", err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: caName}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: notBefore, NotAfter: notAfter}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Issued{}, fmt.Errorf("CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Issued{}, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, fmt.Errorf("server key: %w", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, NotBefore: notBefore, NotAfter: notAfter}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Issued{}, fmt.Errorf("server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Issued{}, fmt.Errorf("server key: %w", err)
	}
	return Issued{
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
