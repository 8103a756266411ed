package handoff

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func validVolume() *Volume {
	return &Volume{Version: Version, VolumeName: "data", Bucket: "my-bucket", Flags: []string{"--implicit-dirs"}}
}

func TestDecodeVolume(t *testing.T) {
	good, err := Encode(validVolume())
	if err != nil {
		t.Fatal(err)
	}
	header := func(magic string, n uint32) []byte {
		h := make([]byte, HeaderSize)
		copy(h, magic)
		binary.BigEndian.PutUint32(h[4:], n)
		return h
	}
	withPayload := func(p string) []byte { return append(header("GCSF", uint32(len(p))), p...) }
	tests := []struct {
		name    string
		frame   []byte
		wantErr string
	}{
		{"valid", good, ""},
		{"empty", nil, "header"},
		{"truncated header", good[:5], "header"},
		{"truncated payload", good[:len(good)-3], "payload"},
		{"garbage", []byte("hello world, not a frame"), "not a hand-off frame"},
		{"oversized", header("GCSF", MaxPayload+1), "outside"},
		{"zero length", header("GCSF", 0), "outside"},
		{"not json", withPayload("{{{{"), "decode"},
		{"unknown field", withPayload(`{"version":1,"volumeName":"a","bucket":"b","evil":1}`), "unknown field"},
		{"trailing data", withPayload(`{"version":1,"volumeName":"a","bucket":"b"}{}`), "trailing"},
		{"wrong version", withPayload(`{"version":3,"volumeName":"a","bucket":"b"}`), "version 3"},
		{"version 0", withPayload(`{"version":0,"volumeName":"a","bucket":"b"}`), "version 0"},
		{"network fields in a version 1 frame", withPayload(`{"version":1,"volumeName":"a","bucket":"b","httpsProxy":"http://p:1"}`), "carries fields of version 2"},
		{"bad proxy", withPayload(`{"version":2,"volumeName":"a","bucket":"b","httpsProxy":"ftp://p"}`), "proxy settings"},
		{"bad volume name", withPayload(`{"version":1,"volumeName":"../x","bucket":"b"}`), "invalid volume name"},
		{"no bucket", withPayload(`{"version":1,"volumeName":"a"}`), "empty bucket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := DecodeVolume(tt.frame)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if v.Bucket != "my-bucket" || v.VolumeName != "data" || len(v.Flags) != 1 {
					t.Fatalf("round trip lost data: %+v", v)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// A version 2 frame carries the proxy and CA settings whole; a volume without them is sent
// as version 1, which the previous release's sidecars read.
func TestNetworkFieldsRoundTrip(t *testing.T) {
	v := validVolume()
	if v.NeededVersion() != Version {
		t.Fatalf("a volume without proxy or CA needs version %d", v.NeededVersion())
	}
	v.HTTPSProxy, v.HTTPProxy, v.NoProxy, v.CABundle = "http://u:pw@proxy:3128", "http://proxy:3129", ".svc,10.0.0.0/8", true
	if v.NeededVersion() != VersionNetwork {
		t.Fatalf("a volume with proxy and CA needs version %d", v.NeededVersion())
	}
	v.Version = v.NeededVersion()
	frame, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeVolume(frame)
	if err != nil {
		t.Fatal(err)
	}
	if got.Proxy() != v.Proxy() || !got.CABundle || got.Version != VersionNetwork {
		t.Fatalf("round trip: %+v", got)
	}
	for _, only := range []Volume{{CABundle: true}, {NoProxy: "x", HTTPProxy: "http://p:1"}} {
		if only.NeededVersion() != VersionNetwork {
			t.Errorf("%+v needs version %d", only, only.NeededVersion())
		}
	}
}

func TestEncodeRefusesOversized(t *testing.T) {
	v := validVolume()
	v.Flags = []string{strings.Repeat("x", MaxPayload)}
	if _, err := Encode(v); err == nil {
		t.Fatal("an oversized payload was encoded")
	}
}

func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func TestSendRecvVolumeCarriesDescriptor(t *testing.T) {
	a, b := socketPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := SendVolume(a, validVolume(), int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	v, f, err := RecvVolume(b)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v.Bucket != "my-bucket" {
		t.Fatalf("bucket = %q", v.Bucket)
	}
	// The received descriptor is the pipe's write end: bytes written to it come out of r.
	if _, err := f.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := r.Read(buf); err != nil || string(buf) != "ping" {
		t.Fatalf("descriptor does not reach the pipe: %q %v", buf, err)
	}

	if err := SendStatus(b, &Status{State: StateStarted, ElapsedMillis: 12}); err != nil {
		t.Fatal(err)
	}
	s, err := RecvStatus(a)
	if err != nil || s.State != StateStarted || s.ElapsedMillis != 12 {
		t.Fatalf("status = %+v, %v", s, err)
	}
}

func TestRecvVolumeWithoutDescriptorFails(t *testing.T) {
	a, b := socketPair(t)
	frame, _ := Encode(validVolume())
	if _, err := a.Write(frame); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RecvVolume(b); err == nil || !strings.Contains(err.Error(), "0 descriptors") {
		t.Fatalf("error = %v, want a missing descriptor error", err)
	}
}

func TestRecvVolumeTwoDescriptorsFails(t *testing.T) {
	a, b := socketPair(t)
	frame, _ := Encode(validVolume())
	if _, _, err := a.WriteMsgUnix(frame, unix.UnixRights(0, 1), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RecvVolume(b); err == nil || !strings.Contains(err.Error(), "2 descriptors") {
		t.Fatalf("error = %v, want a too many descriptors error", err)
	}
}

func TestRecvVolumeTruncatedStream(t *testing.T) {
	a, b := socketPair(t)
	frame, _ := Encode(validVolume())
	if _, _, err := a.WriteMsgUnix(frame[:len(frame)-4], unix.UnixRights(0), nil); err != nil {
		t.Fatal(err)
	}
	a.CloseWrite()
	if _, _, err := RecvVolume(b); err == nil {
		t.Fatal("a truncated frame was accepted")
	}
}

func FuzzDecodeVolume(f *testing.F) {
	good, _ := Encode(validVolume())
	f.Add(good)
	f.Add([]byte("GCSF\x00\x00\x00\x02{}"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		v, err := DecodeVolume(frame)
		if err != nil {
			return
		}
		// Any version this build reads (a version-2 frame may leave its version-2 fields out).
		if !contract.ValidVolumeName(v.VolumeName) || v.Bucket == "" || v.Version < Version || v.Version > MaxVersion || v.Version < v.NeededVersion() {
			t.Fatalf("accepted an invalid volume: %+v", v)
		}
		again, err := Encode(v)
		if err != nil {
			t.Fatalf("accepted volume does not re-encode: %v", err)
		}
		if _, err := DecodeVolume(again); err != nil {
			t.Fatalf("re-encoded volume does not decode: %v", err)
		}
	})
}

func FuzzDecodeStatus(f *testing.F) {
	good, _ := Encode(&Status{Version: Version, State: StateFailed, Message: "bucket not found"})
	f.Add(good)
	f.Add([]byte("GCSF\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, frame []byte) {
		s, err := DecodeStatus(frame)
		if err != nil {
			return
		}
		if s.Validate() != nil {
			t.Fatalf("accepted an invalid status: %+v", s)
		}
	})
}

// DecodeVolume decodes and validates one complete Volume frame, as the sidecar's receive
// does in steps (the fuzz target's entry point).
func DecodeVolume(frame []byte) (*Volume, error) {
	var v Volume
	if err := ReadFrame(bytes.NewReader(frame), nil, &v); err != nil {
		return nil, err
	}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return &v, nil
}

// DecodeStatus decodes and validates one complete Status frame.
func DecodeStatus(frame []byte) (*Status, error) {
	var s Status
	if err := ReadFrame(bytes.NewReader(frame), nil, &s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}
