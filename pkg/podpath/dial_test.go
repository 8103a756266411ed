package podpath

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestDialUnixReachesSocketAndRefusesSymlink(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	serve := func(path string) {
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() { // ends when the listener closes at cleanup
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(filepath.Base(path)))
				c.Close()
			}
		}()
	}
	serve(filepath.Join(root, "ok.sock"))
	serve(filepath.Join(outside, "host.sock"))
	if err := os.Symlink(filepath.Join(outside, "host.sock"), filepath.Join(root, "evil.sock")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "plain"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir, err := OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	deadline := time.Now().Add(2 * time.Second)

	c, err := DialUnix(dir, "ok.sock", deadline)
	if err != nil {
		t.Fatalf("dial the socket: %v", err)
	}
	buf := make([]byte, 16)
	n, _ := c.Read(buf)
	c.Close()
	if string(buf[:n]) != "ok.sock" {
		t.Fatalf("read %q from ok.sock", buf[:n])
	}
	if c, err := DialUnix(dir, "evil.sock", deadline); err == nil {
		c.Close()
		t.Fatal("DialUnix followed a symlink to a socket outside the directory")
	}
	if c, err := DialUnix(dir, "plain", deadline); err == nil {
		c.Close()
		t.Fatal("DialUnix connected to a regular file")
	}
	if _, err := DialUnix(dir, "../x.sock", deadline); err == nil {
		t.Fatal("DialUnix took a name with a slash")
	}
}
