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
