package fuseerr

import (
	"encoding/binary"
	"syscall"
	"testing"
)

// request is a FUSE request header with no body: opcode, unique and node ID.
func request(opcode uint32, unique, node uint64) []byte {
	b := make([]byte, inHeaderSize)
	binary.LittleEndian.PutUint32(b[0:4], inHeaderSize)
	binary.LittleEndian.PutUint32(b[4:8], opcode)
	binary.LittleEndian.PutUint64(b[8:16], unique)
	binary.LittleEndian.PutUint64(b[16:24], node)
	return b
}

// A request interrupted between serve's read and its reply (the kernel refuses the reply
// with ENOENT), or before its read (ENOENT on read), ends nothing: the next request is
// answered with EIO, and the loop ends only with the connection (ENODEV). A loop that
// stopped there would leave every later access to a dead mount waiting forever.
func TestServeOutlivesInterruptedRequests(t *testing.T) {
	const lookup = 1 // FUSE_LOOKUP
	reads := []struct {
		req []byte
		err error
	}{
		{req: request(opGetattr, 1, 7)}, // its reply refused: interrupted meanwhile
		{err: syscall.ENOENT},           // interrupted before it was read
		{req: request(lookup, 2, rootNodeID)},
		{err: syscall.ENODEV}, // unmounted
	}
	var replies [][]byte
	w := wire{
		read: func(b []byte) (int, error) {
			if len(reads) == 0 {
				t.Fatal("read after the end")
			}
			r := reads[0]
			reads = reads[1:]
			if r.err != nil {
				return 0, r.err
			}
			return copy(b, r.req), nil
		},
		write: func(b []byte) (int, error) {
			replies = append(replies, append([]byte(nil), b...))
			if len(replies) == 1 {
				return 0, syscall.ENOENT
			}
			return len(b), nil
		},
		clearDeadline: func() {},
	}
	if err := serve(w, false, nil); err != nil {
		t.Fatalf("serve ended with %v, want nil at the unmount", err)
	}
	if len(replies) != 2 {
		t.Fatalf("%d replies, want 2 (the refused one and the next request's)", len(replies))
	}
	unique := binary.LittleEndian.Uint64(replies[1][8:16])
	errno := int32(binary.LittleEndian.Uint32(replies[1][4:8]))
	if unique != 2 || errno != -int32(syscall.EIO) {
		t.Fatalf("the next request's reply: unique %d errno %d, want 2 and -EIO", unique, errno)
	}
}
