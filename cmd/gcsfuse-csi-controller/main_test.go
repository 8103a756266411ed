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
