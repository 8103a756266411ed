package csidriver

import (
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// The node's machine type reaches every gcsfuse as --machine-type, so that gcsfuse skips its
// metadata lookups at start; a volume that sets its own keeps it, and with none configured
// nothing is added (gcsfuse looks it up itself).
func TestPublishPassesTheMachineType(t *testing.T) {
	rw := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	for _, tt := range []struct {
		name, machineType string
		options           []string
		want              []string
	}{
		{"node's type", "n2-standard-4", []string{"implicit-dirs"}, []string{"--implicit-dirs", "--machine-type=n2-standard-4"}},
		{"unknown node", MachineTypeUnknown, nil, []string{"--machine-type=unknown"}},
		{"volume's own wins", "n2-standard-4", []string{"machine-type=a3-highgpu-8g"}, []string{"--machine-type=a3-highgpu-8g"}},
		{"lookup: nothing added", "", []string{"implicit-dirs"}, []string{"--implicit-dirs"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNodeServer(Config{NodeID: "n1", KubeletRoot: root, SidecarUID: 65534, SidecarGID: 65534, MachineType: tt.machineType},
				nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			r, err := s.validatePublish(&csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: target, VolumeCapability: mountCap(rw, tt.options...)})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Volume.Flags, tt.want) {
				t.Fatalf("flags = %q, want %q", r.Volume.Flags, tt.want)
			}
		})
	}
}

// A machine type learnt after a volume was published is used from the next publish on, and
// the republish of that volume still matches it (the kubelet republishes every volume
// periodically when the CSIDriver asks for tokens).
func TestSetMachineTypeLaterKeepsRepublishMatching(t *testing.T) {
	rw := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	s := mustNodeServer(Config{NodeID: "n1", KubeletRoot: root, SidecarUID: 65534, SidecarGID: 65534},
		nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	req := &csi.NodePublishVolumeRequest{VolumeId: "bkt", TargetPath: target, VolumeCapability: mountCap(rw, "implicit-dirs")}
	before, err := s.validatePublish(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetMachineType("n2-standard-4"); err != nil {
		t.Fatal(err)
	}
	after, err := s.validatePublish(req)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"--implicit-dirs", "--machine-type=n2-standard-4"}; !reflect.DeepEqual(after.Volume.Flags, want) {
		t.Fatalf("flags after SetMachineType = %q, want %q", after.Volume.Flags, want)
	}
	if !sameVolume(before.Volume, after.Volume) {
		t.Fatal("the republish of a volume published before the machine type was learnt does not match it")
	}
	if err := s.SetMachineType("bad type"); err == nil {
		t.Fatal("a bad machine type was accepted")
	}
}
