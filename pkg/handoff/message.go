// Package handoff is the protocol between the privileged node plugin and the unprivileged
// sidecar. The node plugin listens on a unix socket inside the pod's emptyDir; the sidecar
// connects, receives one Volume frame carrying the opened /dev/fuse descriptor (SCM_RIGHTS),
// and answers with Status frames (started, failed, exited).
//
// A frame is a fixed header (4-byte magic, 4-byte big-endian length) followed by a JSON
// payload of at most MaxPayload bytes. The header makes truncation and garbage detectable
// before any JSON is parsed, and the bound keeps a hostile peer from making us allocate.
package handoff

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
)

// Version is the protocol's base version: every Status frame, and a Volume frame that needs
// nothing newer, carries it, so that a peer of the previous release reads what this build
// writes whenever it can. A frame with a version the reader does not know is refused, so
// that a skewed node plugin and sidecar fail loudly instead of misreading.
const Version = 1

// VersionNetwork is the version of a Volume frame that carries how gcsfuse reaches the
// endpoint (a proxy, an extra CA bundle): fields a sidecar of version 1 does not know, and
// would ignore if it could, sending the volume's traffic past the proxy and without the CA.
// It refuses such a frame instead (the pod fails, saying why; docs/upgrade.md). A node
// plugin sends it only when the driver is configured with a proxy or a CA (NeededVersion).
const VersionNetwork = 2

// MaxVersion is the newest Volume version this build reads.
const MaxVersion = VersionNetwork

// MaxPayload bounds a frame's JSON payload.
const MaxPayload = 64 << 10

// HeaderSize is the size of the fixed frame header.
const HeaderSize = 8

var magic = [4]byte{'G', 'C', 'S', 'F'}

// Volume is what the node plugin tells the sidecar about one mounted volume.
type Volume struct {
	Version int `json:"version"`
	// VolumeName is the pod's volume name; it names the socket, the temp dir and log lines.
	VolumeName string `json:"volumeName"`
	// Bucket is the GCS bucket to serve.
	Bucket string `json:"bucket"`
	// ReadOnly records that the kernel mount is read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
	// Flags are gcsfuse flags that already went through the mount option allowlist.
	Flags []string `json:"flags,omitempty"`
	// Endpoint is the driver-level GCS endpoint (an emulator); empty means real GCS.
	Endpoint string `json:"endpoint,omitempty"`
	// KeyFile says gcsfuse reads its credentials with --key-file from the file the node
	// plugin wrote in the emptyDir (podfiles.Paths.CredentialsConfigFile). Unset:
	// Application Default Credentials (anonymous with an emulator Endpoint). The frame never
	// carries a secret, only where the sidecar finds it.
	KeyFile bool `json:"keyFile,omitempty"`
	// Identity names who reads the bucket, for the sidecar's messages (never a secret).
	Identity string `json:"identity,omitempty"`

	// Version 2 (VersionNetwork): how gcsfuse reaches the endpoint, the driver's settings
	// (pkg/netconf). The sidecar puts them in gcsfuse's environment only.

	// HTTPSProxy, HTTPProxy and NoProxy are HTTPS_PROXY, HTTP_PROXY and NO_PROXY. A proxy
	// URL may hold a user and password: never log a Volume's proxies but through
	// netconf.Proxy's redacted forms (Volume.Proxy).
	HTTPSProxy string `json:"httpsProxy,omitempty"`
	HTTPProxy  string `json:"httpProxy,omitempty"`
	NoProxy    string `json:"noProxy,omitempty"`
	// CABundle says the node plugin wrote an extra CA bundle (PEM) for the volume in the
	// emptyDir (podfiles.Paths.CABundleFile): gcsfuse trusts it besides the system's roots.
	CABundle bool `json:"caBundle,omitempty"`
}

// Proxy is the volume's proxy settings.
func (v *Volume) Proxy() netconf.Proxy {
	return netconf.Proxy{HTTPS: v.HTTPSProxy, HTTP: v.HTTPProxy, NoProxy: v.NoProxy}
}

// NeededVersion is the lowest version whose frame holds everything v carries: Version, or
// VersionNetwork with a proxy or a CA bundle.
func (v *Volume) NeededVersion() int {
	if !v.Proxy().IsZero() || v.CABundle {
		return VersionNetwork
	}
	return Version
}

// maxIdentity bounds Volume.Identity.
const maxIdentity = 512

// States a Status frame can carry.
const (
	StateStarted = "started" // gcsfuse answered the kernel: the mount serves
	StateFailed  = "failed"  // gcsfuse could not start; Message says why
	StateExited  = "exited"  // gcsfuse ended after having started; Message says why
	// StateRefused: the sidecar refused the offered volume (version, flags, name); Message
	// says why. The sidecar answers that mount with I/O errors so the pod fails visibly.
	StateRefused = "refused"
	// StateTerminating: the sidecar got SIGTERM while containers may still use the mount
	// (legacy mode, or native with init containers that use it). Whatever stopped the pod
	// (deletion, activeDeadlineSeconds, eviction, node shutdown), the node plugin follows the
	// pod's containers in the runtime and writes the exit file once they have exited.
	StateTerminating = "terminating"
	// StateStopping: the sidecar stops this volume's gcsfuse on purpose (told to exit, or at
	// the end of its SIGTERM): the mount's end that follows is no death, and the node plugin
	// does not mount it again (pkg/sidecarmounter). A node plugin older than this state skips
	// the frame.
	StateStopping = "stopping"
)

// Status is what the sidecar reports back about one volume.
type Status struct {
	Version int    `json:"version"`
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	// ElapsedMillis is the time from receiving the descriptor to this state.
	ElapsedMillis int64 `json:"elapsedMillis,omitempty"`
}

// Validate checks a Volume received from the wire. The sidecar re-checks the flags against
// the allowlist itself; this covers the envelope.
func (v *Volume) Validate() error {
	if v.Version < Version || v.Version > MaxVersion {
		return fmt.Errorf("unsupported hand-off version %d (this sidecar speaks %d to %d)", v.Version, Version, MaxVersion)
	}
	if v.Version < v.NeededVersion() {
		return fmt.Errorf("hand-off version %d carries fields of version %d (proxy, CA bundle)", v.Version, v.NeededVersion())
	}
	if err := v.Proxy().Validate(); err != nil {
		return fmt.Errorf("proxy settings: %w", err)
	}
	if !contract.ValidVolumeName(v.VolumeName) {
		return fmt.Errorf("invalid volume name %q", v.VolumeName)
	}
	if v.Bucket == "" {
		return errors.New("empty bucket name")
	}
	if len(v.Identity) > maxIdentity {
		return fmt.Errorf("identity longer than %d bytes", maxIdentity)
	}
	for _, r := range v.Identity {
		if r < ' ' || r == 0x7f {
			return errors.New("identity has control characters")
		}
	}
	return nil
}

// Validate checks a Status received from the wire.
func (s *Status) Validate() error {
	if s.Version != Version {
		return fmt.Errorf("unsupported status version %d (this node plugin speaks %d)", s.Version, Version)
	}
	switch s.State {
	case StateStarted, StateFailed, StateExited, StateRefused, StateTerminating, StateStopping:
		return nil
	}
	return fmt.Errorf("%w %q", ErrUnknownState, s.State)
}

// ErrUnknownState marks a well-formed Status whose state this build does not know: a newer
// peer may send states added after it. The frame was read whole, so a reader can go on.
var ErrUnknownState = errors.New("unknown status state")

// Encode returns the frame for a payload value.
func Encode(v any) ([]byte, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode hand-off payload: %w", err)
	}
	if len(payload) > MaxPayload {
		return nil, fmt.Errorf("hand-off payload is %d bytes, limit %d", len(payload), MaxPayload)
	}
	frame := make([]byte, HeaderSize+len(payload))
	copy(frame, magic[:])
	binary.BigEndian.PutUint32(frame[4:], uint32(len(payload)))
	copy(frame[HeaderSize:], payload)
	return frame, nil
}

// ParseHeader checks a frame header and returns the payload length it announces.
func ParseHeader(h []byte) (int, error) {
	if len(h) < HeaderSize {
		return 0, fmt.Errorf("truncated hand-off header: %d of %d bytes", len(h), HeaderSize)
	}
	if !bytes.Equal(h[:4], magic[:]) {
		return 0, fmt.Errorf("not a hand-off frame (magic %q)", h[:4])
	}
	n := binary.BigEndian.Uint32(h[4:HeaderSize])
	if n == 0 || n > MaxPayload {
		return 0, fmt.Errorf("hand-off payload length %d outside 1..%d", n, MaxPayload)
	}
	return int(n), nil
}

// DecodePayload parses a payload strictly: unknown fields and trailing data are errors.
func DecodePayload(payload []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode hand-off payload: %w", err)
	}
	if dec.More() {
		return errors.New("decode hand-off payload: trailing data")
	}
	return nil
}

// ReadFrame reads one frame from r (the header already consumed bytes in prefix, if any)
// and decodes its payload into v.
func ReadFrame(r io.Reader, prefix []byte, v any) error {
	buf := make([]byte, HeaderSize)
	n := copy(buf, prefix)
	if n < HeaderSize {
		if _, err := io.ReadFull(r, buf[n:]); err != nil {
			return fmt.Errorf("read hand-off header: %w", err)
		}
	}
	size, err := ParseHeader(buf)
	if err != nil {
		return err
	}
	payload := make([]byte, size)
	m := copy(payload, prefix[min(len(prefix), HeaderSize):])
	if m < size {
		if _, err := io.ReadFull(r, payload[m:]); err != nil {
			return fmt.Errorf("read hand-off payload (%d of %d bytes): %w", m, size, err)
		}
	}
	return DecodePayload(payload, v)
}
