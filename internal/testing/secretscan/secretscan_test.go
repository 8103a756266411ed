package secretscan

import (
	"reflect"
	"testing"
)

func TestParts(t *testing.T) {
	if got := Parts("tok-abc"); !reflect.DeepEqual(got, []string{"tok-abc"}) {
		t.Fatalf("token: %q", got)
	}
	pem := "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASD\nshort\n-----END PRIVATE KEY-----\n"
	want := []string{"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASD"}
	if got := Parts(pem); !reflect.DeepEqual(got, want) {
		t.Fatalf("pem: %q, want %q", got, want)
	}
}
