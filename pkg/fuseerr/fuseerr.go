// Package fuseerr serves a FUSE connection whose every file operation fails with EIO, while
// the mount point itself can still be stat'ed.
//
// Why: when gcsfuse cannot start in a native-sidecar pod (a missing bucket, no permission),
// closing the FUSE descriptor leaves a mount that answers ENOTCONN even to a stat of the
// mount point. The kubelet stats it to create the app container and fails with
// CreateContainerError forever: the Job never ends. Serving "I/O error" instead lets the app
// start, fail on its first access, and the pod fail visibly, with the sidecar's Event saying
// why.
//
// The node's shared mounter uses it too, for a connection whose gcsfuse died while serving
// pods (TakeOver): they then see EIO, as from a failed disk, never an empty directory.
package fuseerr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FUSE opcodes and sizes this server needs (linux/fuse.h).
const (
	opGetattr     = 3
	opForget      = 2
	opInit        = 26
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42

	inHeaderSize  = 40
	outHeaderSize = 16
	initOutSize   = 64
	attrOutSize   = 104 // fuse_attr_out: attr_valid, attr_valid_nsec, dummy, fuse_attr
	rootNodeID    = 1
	bufferSize    = 1<<20 + 4096
	// initBufferSize is the read buffer of a connection whose INIT this server answers
	// (max_write 4096): 64 KiB, above the kernel's FUSE_MIN_READ_BUFFER (8 KiB), so that the
	// node plugin, which answers dead targets of pods this way (pkg/sidecarmounter), holds
	// 64 KiB per such mount, not 1 MiB.
	initBufferSize = 64 << 10

	// notifyResend is FUSE_NOTIFY_RESEND (Linux 6.9, linux/fuse.h): the kernel puts every
	// request that a server of the connection read but never answered back in the queue.
	notifyResend = 7
)

// Pollable returns a non-blocking duplicate of a FUSE descriptor, so that Serve can put a
// deadline on its first read and Close can interrupt it. The original stays open.
func Pollable(fuse *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(fuse.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup FUSE descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("set FUSE descriptor non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/fuse"), nil
}

// ErrInitTaken means the kernel's INIT request was already read by another server (gcsfuse
// died after reading it): the connection cannot be answered and must be closed.
var ErrInitTaken = errors.New("FUSE INIT was already taken by another server")

// ErrNoResend means the kernel cannot hand back the requests a dead server had read
// (FUSE_NOTIFY_RESEND needs Linux 6.9): answering the connection would leave their callers
// waiting forever, uninterruptibly, so the caller must close it instead (the kernel then
// aborts it and every caller gets ENOTCONN).
var ErrNoResend = errors.New("the kernel cannot resend a dead FUSE server's requests (FUSE_NOTIFY_RESEND, Linux 6.9)")

// TakeOver prepares a connection whose server died after answering INIT (and maybe in the
// middle of requests) for ServeEIO: it asks the kernel to queue again every request the dead
// server had read and not answered, so they get their EIO too instead of waiting forever.
// fuse is from Pollable, taken only once the dead server's descriptor is closed (Pollable
// makes the shared open file non-blocking). On ErrNoResend the caller closes fuse.
func TakeOver(fuse *os.File) error {
	// A notification is an out header with unique 0 and the code in the error field.
	b := make([]byte, outHeaderSize)
	binary.LittleEndian.PutUint32(b[0:4], outHeaderSize)
	binary.LittleEndian.PutUint32(b[4:8], notifyResend)
	if _, err := fuse.Write(b); err != nil {
		if errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("%w: %v", ErrNoResend, err)
		}
		return fmt.Errorf("write FUSE_NOTIFY_RESEND: %w", err)
	}
	return nil
}

// ServeEIO answers a connection after TakeOver, as Serve does after INIT, until the
// connection ends (its last mount is gone) or fuse is closed.
func ServeEIO(fuse *os.File) error {
	return serve(fileWire(fuse), false, nil)
}

// Serve answers requests on fuse (from Pollable) until the connection ends (unmount) or the
// file is closed. The first request must be INIT, within initWait; otherwise ErrInitTaken is
// returned and the caller should close fuse so the kernel aborts the connection. onInit, if
// not nil, is called once INIT has been answered.
func Serve(fuse *os.File, initWait time.Duration, onInit func()) error {
	if err := fuse.SetReadDeadline(time.Now().Add(initWait)); err != nil {
		return fmt.Errorf("FUSE descriptor is not pollable: %w", err)
	}
	return serve(fileWire(fuse), true, onInit)
}

// wire is what serve needs of a FUSE connection: a request per read, a reply per write, and
// the end of Serve's wait for INIT. A seam for tests, which cannot make the kernel interrupt
// a request between serve's read and its reply.
type wire struct {
	read          func([]byte) (int, error)
	write         func([]byte) (int, error)
	clearDeadline func()
}

// fileWire is the wire of a FUSE descriptor from Pollable.
func fileWire(fuse *os.File) wire {
	return wire{
		read:          func(b []byte) (int, error) { return read(fuse, b) },
		write:         fuse.Write,
		clearDeadline: func() { _ = fuse.SetReadDeadline(time.Time{}) },
	}
}

// serve is Serve's loop; first says whether the connection's INIT is still to come. A reply
// the kernel refuses with ENOENT is to a request interrupted meanwhile (its caller got
// EINTR): the loop goes on, or every later access to the mount would wait for an answer that
// never comes.
func serve(fuse wire, first bool, onInit func()) error {
	// A connection this server answered INIT for has its max_write (4096): the kernel asks
	// for no more than initBufferSize per read, and fails a larger request (a big
	// setxattr) with EIO or E2BIG itself. One taken over keeps its dead server's max_write.
	size := bufferSize
	if first {
		size = initBufferSize
	}
	buf := make([]byte, size)
	for {
		n, err := fuse.read(buf)
		if err != nil {
			if first && errors.Is(err, os.ErrDeadlineExceeded) {
				return ErrInitTaken
			}
			if errors.Is(err, syscall.ENODEV) || errors.Is(err, os.ErrClosed) {
				return nil // unmounted, or stopped by the caller
			}
			if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ENOENT) {
				continue // ENOENT: the request was interrupted before we read it
			}
			return fmt.Errorf("read FUSE request: %w", err)
		}
		if n < inHeaderSize {
			return fmt.Errorf("short FUSE request: %d bytes", n)
		}
		opcode := binary.LittleEndian.Uint32(buf[4:8])
		unique := binary.LittleEndian.Uint64(buf[8:16])
		nodeID := binary.LittleEndian.Uint64(buf[16:24])
		if first {
			if opcode != opInit {
				return ErrInitTaken
			}
			first = false
			fuse.clearDeadline()
		}
		var reply []byte
		switch opcode {
		case opForget, opBatchForget, opInterrupt:
			continue // no reply expected
		case opInit:
			reply = initReply(unique, buf[inHeaderSize:n])
		case opGetattr:
			if nodeID == rootNodeID {
				reply = rootAttrReply(unique)
			} else {
				reply = errReply(unique, unix.EIO)
			}
		case opDestroy:
			reply = errReply(unique, 0)
		default:
			reply = errReply(unique, unix.EIO)
		}
		if _, err := fuse.write(reply); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("write FUSE reply: %w", err)
		}
		if opcode == opInit && onInit != nil {
			onInit()
		}
		if opcode == opDestroy {
			return nil
		}
	}
}

// read reads one request. Once the kernel ends the connection (unmount), epoll reports an
// error on the descriptor and Go's poller answers every later Read with a generic "not
// pollable" error instead of the kernel's ENODEV; then the read is made directly on the
// descriptor, so the caller sees the kernel's own answer.
func read(fuse *os.File, buf []byte) (int, error) {
	n, err := fuse.Read(buf)
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, os.ErrClosed) {
		return n, err
	}
	rc, cerr := fuse.SyscallConn()
	if cerr != nil {
		return n, err
	}
	var rerr error
	if cerr := rc.Control(func(fd uintptr) { n, rerr = unix.Read(int(fd), buf) }); cerr != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, &os.PathError{Op: "read", Path: fuse.Name(), Err: rerr}
	}
	return n, nil
}

func header(size int, errno syscall.Errno, unique uint64) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b[0:4], uint32(size))
	binary.LittleEndian.PutUint32(b[4:8], uint32(-int32(errno)))
	binary.LittleEndian.PutUint64(b[8:16], unique)
	return b
}

func errReply(unique uint64, errno syscall.Errno) []byte { return header(outHeaderSize, errno, unique) }

// initReply accepts protocol 7.31 (or the kernel's lower minor) with no optional features.
func initReply(unique uint64, in []byte) []byte {
	if len(in) < 12 {
		return errReply(unique, unix.EIO)
	}
	major := binary.LittleEndian.Uint32(in[0:4])
	minor := binary.LittleEndian.Uint32(in[4:8])
	readahead := binary.LittleEndian.Uint32(in[8:12])
	if major != 7 {
		return errReply(unique, unix.EPROTO)
	}
	b := header(outHeaderSize+initOutSize, 0, unique)
	o := b[outHeaderSize:]
	binary.LittleEndian.PutUint32(o[0:4], 7)
	binary.LittleEndian.PutUint32(o[4:8], min(minor, 31))
	binary.LittleEndian.PutUint32(o[8:12], readahead)
	binary.LittleEndian.PutUint16(o[16:18], 1)    // max_background
	binary.LittleEndian.PutUint16(o[18:20], 1)    // congestion_threshold
	binary.LittleEndian.PutUint32(o[20:24], 4096) // max_write
	binary.LittleEndian.PutUint32(o[24:28], 1)    // time_gran
	return b
}

// rootAttrReply describes the root as an empty, read-only-looking directory.
func rootAttrReply(unique uint64) []byte {
	b := header(outHeaderSize+attrOutSize, 0, unique)
	o := b[outHeaderSize:]
	binary.LittleEndian.PutUint64(o[0:8], 1) // attr_valid: 1 s
	a := o[16:]
	binary.LittleEndian.PutUint64(a[0:8], rootNodeID)           // ino
	binary.LittleEndian.PutUint32(a[60:64], unix.S_IFDIR|0o555) // mode
	binary.LittleEndian.PutUint32(a[64:68], 2)                  // nlink
	binary.LittleEndian.PutUint32(a[80:84], 4096)               // blksize
	return b
}
