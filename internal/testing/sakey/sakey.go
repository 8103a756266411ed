// Package sakey makes Google service-account keys for tests: one RSA key per test binary
// (generating one costs ~100 ms) and the JSON a Secret's key file holds.
package sakey

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"sync"
	"testing"
)

var (
	once   sync.Once
	keyPEM string
	keyErr error
)

// PEM is the test binary's one RSA private key, PKCS#8 in PEM.
func PEM(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			keyErr = err
			return
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			keyErr = err
			return
		}
		keyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	})
	if keyErr != nil {
		t.Fatal(keyErr)
	}
	return keyPEM
}

// JSON is a service-account key file of account email with key ID id, in project
// my-project, signed with PEM's key.
func JSON(t testing.TB, email, id string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "my-project", "private_key_id": id,
		"private_key": PEM(t), "client_email": email,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
