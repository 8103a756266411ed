package handoff

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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

// TestPreviousReleaseReadsOurFrames: what this build writes, with every field of version 1
// set, is read by the 0.1.0 structs under the same strict rules; so is every Status.
func TestPreviousReleaseReadsOurFrames(t *testing.T) {
	v := Volume{Version: Version, VolumeName: "data", Bucket: "b", ReadOnly: true, Flags: []string{"--implicit-dirs"},
		Endpoint: "http://e", KeyFile: true, Identity: "id"}
	if v.NeededVersion() != Version {
		t.Fatalf("a volume with only version-1 fields needs version %d: the previous release's sidecars could not take it", v.NeededVersion())
	}
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

// networkFields are the Volume fields of VersionNetwork (2). A field that is neither in
// volumeV1 nor here fails TestEveryVolumeFieldHasAVersion.
var networkFields = []string{"httpsProxy", "httpProxy", "noProxy", "caBundle"}

// TestEveryVolumeFieldHasAVersion: Volume's fields are those of version 1 (volumeV1) and of
// version 2. A new field needs a new version (and NeededVersion choosing it), so that a
// sidecar that does not know it refuses the frame by its version instead of ignoring it.
func TestEveryVolumeFieldHasAVersion(t *testing.T) {
	known := map[string]bool{}
	v1 := reflect.TypeFor[volumeV1]()
	for i := range v1.NumField() {
		known[jsonName(v1.Field(i))] = true
	}
	for _, f := range networkFields {
		known[f] = true
	}
	vt := reflect.TypeFor[Volume]()
	for i := range vt.NumField() {
		if n := jsonName(vt.Field(i)); !known[n] {
			t.Errorf("Volume field %q belongs to no protocol version: give it a new Version (docs/upgrade.md)", n)
		}
	}
	if MaxVersion != VersionNetwork {
		t.Errorf("MaxVersion %d: a new version needs its fields listed here and a golden frame in testdata/v%d", MaxVersion, MaxVersion)
	}
}

func jsonName(f reflect.StructField) string { return strings.Split(f.Tag.Get("json"), ",")[0] }

// TestPreviousReleaseRefusesNetworkFrames: a volume with a proxy or a CA bundle goes out as
// version 2, and a sidecar of 0.1.0 refuses it (its strict decoding fails on the first field
// it does not know, and its Validate on the version), which it reports as "refused": the pod
// fails with that message (node plugin Event HandoffRefused, with a hint to recreate the pod)
// rather than gcsfuse going around the proxy or without the CA.
func TestPreviousReleaseRefusesNetworkFrames(t *testing.T) {
	for _, v := range []Volume{
		{VolumeName: "data", Bucket: "b", HTTPSProxy: "http://proxy:3128"},
		{VolumeName: "data", Bucket: "b", CABundle: true},
	} {
		v.Version = v.NeededVersion()
		payload, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var old volumeV1
		err = DecodePayload(payload, &old)
		if err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("a 0.1.0 sidecar decodes %s: %v; it must refuse it", payload, err)
		}
		if v.Version == Version {
			t.Errorf("%s goes out as version 1", payload)
		}
	}
}

// TestReadsThisReleaseNetworkFrame keeps the version-2 frame of this release readable (the
// next release's node plugin may still send it to this sidecar, and the other way round).
func TestReadsThisReleaseNetworkFrame(t *testing.T) {
	payload, err := os.ReadFile("testdata/v2/volume.json")
	if err != nil {
		t.Fatal(err)
	}
	var v Volume
	if err := DecodePayload(payload, &v); err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(); err != nil {
		t.Fatal(err)
	}
	if v.Version != VersionNetwork || v.HTTPSProxy == "" || v.HTTPProxy == "" || v.NoProxy == "" || !v.CABundle {
		t.Fatalf("golden v2 frame lost fields: %+v", v)
	}
}
