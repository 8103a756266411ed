package csidriver

import (
	"context"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// IdentityServer is the CSI Identity service. The driver is node-only: buckets exist
// before volumes do, so there is no controller service to advertise.
type IdentityServer struct {
	csi.UnimplementedIdentityServer
	// Name is the driver name the node plugin is installed under (one of
	// contract.DriverNames); empty: contract.DriverName. The kubelet checks it against the
	// name the registration announced.
	Name    string
	Version string
	// FusePath is probed for readiness; empty means /dev/fuse.
	FusePath string
}

// GetPluginInfo returns the driver name and version.
func (s *IdentityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	v := s.Version
	if v == "" {
		v = "dev"
	}
	name := s.Name
	if name == "" {
		name = contract.DriverName
	}
	return &csi.GetPluginInfoResponse{Name: name, VendorVersion: v}, nil
}

// GetPluginCapabilities reports no optional plugin capabilities (no controller service).
func (s *IdentityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe reports ready only when /dev/fuse can be opened: without it no publish can work.
func (s *IdentityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	p := s.FusePath
	if p == "" {
		p = "/dev/fuse"
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
	}
	f.Close()
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
