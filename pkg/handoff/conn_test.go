package handoff

import (
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A frame that arrives with its descriptor but is refused (another protocol version, an
// unknown field from a newer node plugin, an invalid volume, a truncated payload) hands the
// descriptor back with the error: the sidecar must answer that mount, not drop it.
func TestRecvVolumeRefusedReturnsDescriptor(t *testing.T) {
	v2 := validVolume()
	v2.Version = MaxVersion + 1
	badName := validVolume()
	badName.VolumeName = "../etc"
	future, _ := Encode(map[string]any{"version": Version, "volumeName": "data", "bucket": "b", "newField": true})
	good, _ := Encode(validVolume())
	for _, tt := range []struct {
		name       string
		frame      []byte
		want       string
		wantVolume bool
	}{
		{"other version", mustEncode(t, v2), "unsupported hand-off version", true},
		{"invalid volume name", mustEncode(t, badName), "invalid volume name", true},
		{"unknown field", future, "unknown field", false},
		{"truncated payload", good[:len(good)-4], "read hand-off payload", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, r := sendFrame(t, tt.frame)
			v, f, err := RecvVolume(b)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "refused") {
				t.Fatalf("err = %v, want a refusal containing %q", err, tt.want)
			}
			if f == nil {
				t.Fatal("the descriptor of a refused frame was not handed back")
			}
			defer f.Close()
			if (v != nil) != tt.wantVolume {
				t.Fatalf("volume = %+v, want decoded=%v", v, tt.wantVolume)
			}
			// It is the descriptor that was sent: bytes written to it come out of the pipe.
			if _, err := f.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1)
			if _, err := r.Read(buf); err != nil || buf[0] != 'x' {
				t.Fatalf("returned descriptor is not the sent one: %q %v", buf, err)
			}
		})
	}
}

// Without exactly one descriptor nothing is handed back: there is no mount to answer.
func TestRecvVolumeNoDescriptorReturnsNoFile(t *testing.T) {
	a, b := socketPair(t)
	if _, err := a.Write(mustEncode(t, validVolume())); err != nil {
		t.Fatal(err)
	}
	if _, f, err := RecvVolume(b); err == nil || f != nil {
		t.Fatalf("file = %v, err = %v; want no file and an error", f, err)
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFramesWithoutAVersionAreRefused guards the rule that a frame of version 0, or with no
// version at all (which decodes as 0), is refused as a version this build does not speak:
// a Volume by the sidecar (RecvVolume), a Status by the node plugin (RecvStatus). A
// version-0 Volume would also fail the check of its fields' version, but with a reason that
// blames a proxy or CA bundle it does not carry; the refusal must name the version, which
// the sidecar reports to the user (StateRefused, the HandoffRefused Event).
func TestFramesWithoutAVersionAreRefused(t *testing.T) {
	volumes := map[string]map[string]any{
		"volume of version 0":           {"version": 0, "volumeName": "data", "bucket": "b"},
		"volume without a version":      {"volumeName": "data", "bucket": "b"},
		"volume with proxy, no version": {"volumeName": "data", "bucket": "b", "httpsProxy": "http://proxy:3128"},
	}
	for name, payload := range volumes {
		t.Run(name, func(t *testing.T) {
			b, _ := sendFrame(t, mustEncode(t, payload))
			v, f, err := RecvVolume(b)
			if f != nil {
				defer f.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "unsupported hand-off version 0") {
				t.Fatalf("RecvVolume(%v) = %+v, %v; want a refusal naming the unsupported hand-off version 0", payload, v, err)
			}
		})
	}
	statuses := map[string]map[string]any{
		"status of version 0":      {"version": 0, "state": StateStarted},
		"status without a version": {"state": StateStarted},
	}
	for name, payload := range statuses {
		t.Run(name, func(t *testing.T) {
			a, b := socketPair(t)
			if _, err := a.Write(mustEncode(t, payload)); err != nil {
				t.Fatal(err)
			}
			s, err := RecvStatus(b)
			if err == nil || !strings.Contains(err.Error(), "unsupported status version 0") {
				t.Fatalf("RecvStatus(%v) = %+v, %v; want a refusal naming the unsupported status version 0", payload, s, err)
			}
		})
	}
}

// sendFrame writes frame with the write end of a new pipe as its descriptor into one end of
// a socket pair, closes that end for writing, and returns the other end and the pipe's read
// end (both closed at the test's end).
func sendFrame(t *testing.T, frame []byte) (*net.UnixConn, *os.File) {
	t.Helper()
	a, b := socketPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	if _, _, err := a.WriteMsgUnix(frame, unix.UnixRights(int(w.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	a.CloseWrite()
	return b, r
}
