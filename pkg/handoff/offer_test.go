package handoff

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A newer sidecar may report states this node plugin does not know: the relay skips them
// and still delivers the reports that follow.
func TestOfferRelaySkipsUnknownStates(t *testing.T) {
	tmp, err := os.MkdirTemp("", "offer") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	dir, err := os.Open(tmp)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make(chan *Status, 4)
	o, err := NewOffer(OfferConfig{
		Dir: dir, Volume: validVolume(), Fuse: w, UID: os.Getuid(), GID: os.Getgid(),
		OnStatus: func(s *Status) { got <- s },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()

	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(tmp, SocketName("data")), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, fuse, err := RecvVolume(conn)
	if err != nil {
		t.Fatal(err)
	}
	fuse.Close()
	for _, s := range []*Status{{State: "from-the-future", Message: "x"}, {State: StateTerminating}} {
		if err := SendStatus(conn, s); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case s := <-got:
		if s.State != StateTerminating {
			t.Fatalf("first relayed state = %q, want %q (the unknown one skipped)", s.State, StateTerminating)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the status after an unknown state was not relayed")
	}
}
