package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
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

// TestStoppingLeaderHandsOver: a leader that stops (SIGTERM, a rollout) releases the lease,
// so the standby leads within a retry period, not after the lease's duration; while the
// first leads, the second only stands by.
func TestStoppingLeaderHandsOver(t *testing.T) {
	client := fake.NewClientset()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	leading := make(chan string, 2)
	work := func(id string) func(context.Context) {
		return func(ctx context.Context) { leading <- id; <-ctx.Done() }
	}
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- lead(ctxA, client, "ns", "a", log, work("a")) }()
	select {
	case id := <-leading:
		if id != "a" {
			t.Fatalf("%s leads first", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a does not lead within 10 s")
	}
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneB := make(chan error, 1)
	go func() { doneB <- lead(ctxB, client, "ns", "b", log, work("b")) }()
	select {
	case id := <-leading:
		t.Fatalf("%s leads while a holds the lease", id)
	case <-time.After(2 * retryPeriod):
	}
	stopped := time.Now()
	stopA()
	if err := <-doneA; err != nil {
		t.Fatalf("a stopped with %v, want nil", err)
	}
	select {
	case id := <-leading:
		if took := time.Since(stopped); id != "b" || took >= leaseDuration/2 {
			t.Fatalf("%s leads %s after a stopped, want b well within the lease's %s", id, took, leaseDuration)
		}
	case <-time.After(leaseDuration + 5*time.Second):
		t.Fatal("b never leads")
	}
	stopB()
	if err := <-doneB; err != nil {
		t.Fatalf("b stopped with %v", err)
	}
}
