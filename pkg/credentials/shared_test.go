package credentials

import (
	"strings"
	"testing"
)

func TestSharedADCNamespaces(t *testing.T) {
	for _, tc := range []struct {
		list    string
		allowed []string
		refused []string
	}{
		{list: "", refused: []string{"default", "team-a", ""}},
		{list: "*", allowed: []string{"default", "kube-system", "x"}, refused: []string{""}},
		{list: "batch, ml", allowed: []string{"batch", "ml"}, refused: []string{"batch2", "mlx", "default", ""}},
		{list: "team-*,default", allowed: []string{"team-a", "team-", "default"}, refused: []string{"team", "teams-a", "defaults"}},
	} {
		a, err := ParseSharedADC(tc.list)
		if err != nil {
			t.Fatalf("%q: %v", tc.list, err)
		}
		for _, ns := range tc.allowed {
			if !a.Allows(ns) {
				t.Errorf("%q refuses namespace %q", tc.list, ns)
			}
		}
		for _, ns := range tc.refused {
			if a.Allows(ns) {
				t.Errorf("%q allows namespace %q", tc.list, ns)
			}
		}
	}
	for _, bad := range []string{"Team", "a_b", "*,default", "team-**", "*-team", "a*b", strings.Repeat("x", 64)} {
		if _, err := ParseSharedADC(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The refusal says what was asked, who would read, which namespace, and each way out.
func TestSharedADCRefusalSaysWhatToDo(t *testing.T) {
	msg := SharedADCRefusal("data", "team-a")
	for _, want := range []string{"volume data", "mountMode: shared", "Application Default Credentials", `namespace "team-a"`,
		"mounter.adcNamespaces", "nodePublishSecretRef", "workloadIdentityProvider", "mounter.identityProvider"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal lacks %q: %s", want, msg)
		}
	}
}

// ForShared gives a shared volume the shared provider only where no node-wide one is set.
func TestForSharedProvider(t *testing.T) {
	const node, shared = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool1/providers/node1", "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool1/providers/shared1"
	c := Config{SharedProvider: shared}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	choice, err := Choose(c.ForShared(), map[string]string{}, false)
	if err != nil || choice.Kind != KindFederation || choice.Provider != shared {
		t.Errorf("shared volume, shared provider: %+v, %v; want federation through %s", choice, err, shared)
	}
	if choice, _ := Choose(c, map[string]string{}, false); choice.Kind != KindADC {
		t.Errorf("sidecar volume, shared provider only: %+v; want ADC", choice)
	}
	c.Provider = node
	if choice, _ := Choose(c.ForShared(), map[string]string{}, false); choice.Provider != node {
		t.Errorf("shared volume, node-wide provider: %+v; want %s", choice, node)
	}
	if choice, _ := Choose(c.ForShared(), map[string]string{}, true); choice.Kind != KindKey {
		t.Errorf("shared volume with a key: %+v; want the key", choice)
	}
	bad := Config{SharedProvider: "https://example.com"}.WithDefaults()
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--shared-wif-provider") {
		t.Errorf("bad shared provider: %v; want an error naming --shared-wif-provider", err)
	}
	noToken := Config{SharedProvider: shared, NoServiceAccountToken: true}.WithDefaults()
	if err := noToken.Validate(); err == nil || !strings.Contains(err.Error(), "--shared-wif-provider") {
		t.Errorf("shared provider without a token: %v; want an error naming --shared-wif-provider", err)
	}
}
