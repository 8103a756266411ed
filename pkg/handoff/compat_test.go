package handoff

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The version-skew promise (docs/upgrade.md): a node plugin serves the sidecars of the
// previous release, and during a rollout the other way round too. Both peers decode frames
// strictly (unknown fields are errors), so within one protocol Version the frames are
// frozen: these tests keep the frames of version 1 as the 0.1.0 release wrote them
// (testdata/v1) and as its structs read them (volumeV1, statusV1).

// volumeV1 and statusV1 are the frames of protocol version 1 as release 0.1.0 defines them.
// Never edit them: a new field is a new Version (and a node plugin that still speaks 1).
type volumeV1 struct {
	Version    int      `json:"version"`
	VolumeName string   `json:"volumeName"`
	Bucket     string   `json:"bucket"`
	ReadOnly   bool     `json:"readOnly,omitempty"`
	Flags      []string `json:"flags,omitempty"`
	Endpoint   string   `json:"endpoint,omitempty"`
	KeyFile    bool     `json:"keyFile,omitempty"`
	Identity   string   `json:"identity,omitempty"`
}

type statusV1 struct {
	Version       int    `json:"version"`
	State         string `json:"state"`
	Message       string `json:"message,omitempty"`
	ElapsedMillis int64  `json:"elapsedMillis,omitempty"`
}

// TestReadsPreviousReleaseFrames: this build reads what a 0.1.0 peer writes (a sidecar of
// 0.1.0 under this node plugin; a 0.1.0 node plugin handing off to this sidecar).
func TestReadsPreviousReleaseFrames(t *testing.T) {
	files, err := filepath.Glob("testdata/v1/*.json")
	if err != nil || len(files) < 6 {
		t.Fatalf("golden frames: %v %v", files, err)
	}
	for _, f := range files {
		payload, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var check interface{ Validate() error }
		if filepath.Base(f) == "volume.json" {
			var v Volume
			if err := DecodePayload(payload, &v); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			check = &v
		} else {
			var s Status
			if err := DecodePayload(payload, &s); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			check = &s
		}
		if err := check.Validate(); err != nil {
			t.Errorf("%s: a frame of release 0.1.0 is refused: %v (docs/upgrade.md: a node plugin serves the previous release's sidecars)", f, err)
		}
	}
}

// TestPreviousReleaseReadsOurFrames: what this build writes, with every field set, is read
// by the 0.1.0 structs under the same strict rules. Adding a field to Volume or Status fails
// here: bump Version and keep speaking version 1 to the previous release instead.
func TestPreviousReleaseReadsOurFrames(t *testing.T) {
	v := Volume{Version: Version, VolumeName: "data", Bucket: "b", ReadOnly: true, Flags: []string{"--implicit-dirs"},
		Endpoint: "http://e", KeyFile: true, Identity: "id"}
	s := Status{Version: Version, State: StateStarted, Message: "m", ElapsedMillis: 1}
	for _, c := range []struct {
		ours, theirs any
	}{{v, &volumeV1{}}, {s, &statusV1{}}} {
		payload, err := json.Marshal(c.ours)
		if err != nil {
			t.Fatal(err)
		}
		if err := DecodePayload(payload, c.theirs); err != nil {
			t.Errorf("a 0.1.0 peer cannot read %T: %v (docs/upgrade.md, version skew)", c.ours, err)
		}
	}
	if Version != 1 {
		t.Errorf("Version %d: keep a version-1 encoder for the previous release's sidecars and extend these tests", Version)
	}
}
