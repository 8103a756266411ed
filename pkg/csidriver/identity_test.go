package csidriver

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// The kubelet checks the name GetPluginInfo returns against the registered one: it is the
// name the node plugin is installed under.
func TestGetPluginInfoName(t *testing.T) {
	for name, want := range map[string]string{"": contract.DriverName, contract.IncumbentDriverName: contract.IncumbentDriverName} {
		resp, err := (&IdentityServer{Name: name}).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
		if err != nil || resp.Name != want {
			t.Errorf("Name %q: GetPluginInfo = %v, %v; want %s", name, resp, err, want)
		}
	}
}

// The version the node plugin was built as is reported (kubectl get csinode shows what the
// kubelet logged); a build without one says dev.
func TestGetPluginInfoVersion(t *testing.T) {
	for version, want := range map[string]string{"": "dev", "v1.2.3": "v1.2.3"} {
		resp, err := (&IdentityServer{Version: version}).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
		if err != nil || resp.VendorVersion != want {
			t.Errorf("Version %q: GetPluginInfo = %v, %v; want %s", version, resp, err, want)
		}
	}
}
