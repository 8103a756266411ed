package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--leader-election-namespace=ns", "--gcs-auth=none", "--gcs-endpoint=http://10.0.0.1:1/storage/v1/"}, io.Discard)
	if err != nil || o.driverName != "gcsfuse.csi.storage" || !o.leaderElect || o.gcsAuth != authNone {
		t.Fatalf("%+v, %v", o, err)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--leader-elect=false", "--driver-name=x"}, "driver name"},
		{[]string{"--leader-elect=false", "--gcs-auth=key"}, "--gcs-auth"},
		{[]string{"--leader-election-namespace="}, "needs --leader-election-namespace"},
		{[]string{"--leader-elect=false", "--metrics-addr=9810"}, "--metrics-addr"},
		{[]string{"--leader-elect=false", "extra"}, "unexpected arguments"},
	} {
		t.Setenv("POD_NAMESPACE", "")
		if _, err := parseFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("parseFlags(%q) = %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}

// TestADCMissingSaysWhatToDo: --gcs-auth=adc with credentials that cannot be read stops the
// controller at start with an error saying how to give it an identity, instead of
// provisioning claims that fail one by one. (GOOGLE_APPLICATION_CREDENTIALS is set, so no
// metadata server is asked.)
func TestADCMissingSaysWhatToDo(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", t.TempDir()+"/missing.json")
	_, _, err := gcsClient(&options{gcsAuth: authADC})
	if err == nil || !strings.Contains(err.Error(), "no Application Default Credentials") || !strings.Contains(err.Error(), "GOOGLE_APPLICATION_CREDENTIALS") {
		t.Fatalf("gcsClient = %v", err)
	}
	if c, who, err := gcsClient(&options{gcsAuth: authNone}); err != nil || c == nil || !strings.Contains(who, "anonymous") {
		t.Fatalf("gcsClient(none) = %v, %q, %v", c, who, err)
	}
}
