package sakey

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"testing"
)

func TestJSONIsAParsableKeyOfTheAccount(t *testing.T) {
	var k map[string]string
	if err := json.Unmarshal([]byte(JSON(t, "a@my-project.iam.gserviceaccount.com", "id1")), &k); err != nil {
		t.Fatal(err)
	}
	if k["client_email"] != "a@my-project.iam.gserviceaccount.com" || k["private_key_id"] != "id1" || k["type"] != "service_account" {
		t.Fatalf("key file %v", k)
	}
	block, _ := pem.Decode([]byte(k["private_key"]))
	if block == nil {
		t.Fatal("no PEM private key")
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		t.Fatal(err)
	}
	if PEM(t) != k["private_key"] {
		t.Fatal("a second key was generated")
	}
}
