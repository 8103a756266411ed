package handoff

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// SendVolume writes the Volume frame with fd attached as SCM_RIGHTS in the same sendmsg, so
// the descriptor travels with the first byte of the frame.
func SendVolume(conn *net.UnixConn, v *Volume, fd int) error {
	frame, err := Encode(v)
	if err != nil {
		return err
	}
	n, oobn, err := conn.WriteMsgUnix(frame, unix.UnixRights(fd), nil)
	if err != nil {
		return fmt.Errorf("send hand-off frame: %w", err)
	}
	if n != len(frame) || oobn == 0 {
		return fmt.Errorf("short hand-off write: %d of %d bytes", n, len(frame))
	}
	return nil
}

// RecvVolume reads one Volume frame and the single descriptor that must come with it.
//
// On error, what the caller gets back depends on whether a descriptor arrived:
//   - none, or not exactly one (a read error, a truncated control message): every received
//     descriptor is closed and the file is nil, so a hostile or broken peer cannot leak
//     descriptors into the sidecar;
//   - exactly one, but the frame is refused (unreadable, undecodable, another protocol
//     version, an invalid volume): the descriptor is returned with the error, and so is the
//     volume when it decoded. The mount behind that descriptor is already in use by the
//     pod: the caller must answer it (the sidecar serves it with I/O errors and reports
//     StateRefused) rather than drop it and leave a mount that fails with ENOTCONN. The
//     caller owns the file.
func RecvVolume(conn *net.UnixConn) (*Volume, *os.File, error) {
	buf := make([]byte, HeaderSize+MaxPayload)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, fmt.Errorf("receive hand-off frame: %w", err)
	}
	fds, ferr := parseRights(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if ferr != nil {
		closeAll()
		return nil, nil, ferr
	}
	if flags&unix.MSG_CTRUNC != 0 {
		closeAll()
		return nil, nil, errors.New("hand-off control message truncated: too many descriptors")
	}
	if len(fds) != 1 {
		closeAll()
		return nil, nil, fmt.Errorf("hand-off carried %d descriptors, want exactly 1", len(fds))
	}
	fuse := os.NewFile(uintptr(fds[0]), "/dev/fuse")
	var v Volume
	if err := ReadFrame(conn, buf[:n], &v); err != nil {
		return nil, fuse, fmt.Errorf("hand-off refused: %w", err)
	}
	if err := v.Validate(); err != nil {
		return &v, fuse, fmt.Errorf("hand-off refused: %w", err)
	}
	return &v, fuse, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse hand-off control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("parse hand-off descriptors: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// SendStatus writes one Status frame.
func SendStatus(conn net.Conn, s *Status) error {
	s.Version = Version
	frame, err := Encode(s)
	if err != nil {
		return err
	}
	if _, err := conn.Write(frame); err != nil {
		return fmt.Errorf("send hand-off status: %w", err)
	}
	return nil
}

// RecvStatus reads and validates one Status frame.
func RecvStatus(conn net.Conn) (*Status, error) {
	var s Status
	if err := ReadFrame(conn, nil, &s); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadStatus, err)
	}
	return &s, nil
}

// ErrBadStatus marks a Status frame read whole that this build cannot take (another version,
// a state it does not know): the stream itself is intact, and a reader can go on.
var ErrBadStatus = errors.New("status frame not taken")
