// Command nodessh is the local cluster's SSH endpoint on its node, for the storage
// testsuites' disruptive tests: they stop, start and restart the kubelet with `systemctl`
// and look at the node's mounts with `mount | grep`, over SSH to the node's address (the
// framework's e2essh, key from KUBE_SSH_KEY_PATH), which a cluster started by hack/ has no
// other way to offer. hack/cluster-up.sh starts it inside the cluster's network namespace on
// NODE_IP:22 (and only there: nothing listens on this machine's own addresses).
//
// It runs each "exec" request as `bash -c COMMAND` in this machine's mount namespace, which
// receives every mount the node makes under its state directories (/var/lib/kubelet, the
// runtimes': hack/cluster-up.sh),
// with -path first in PATH, where hack/node-systemctl.sh stands in for systemctl (the kubelet
// is a process of the node that cluster-up.sh started, not a unit) and sudo runs its
// arguments as they are.
// Only the public key of -key (made on first use) is accepted; shells, terminals and port
// forwarding are refused. Each command is bounded by commandTimeout.
//
//	nodessh -listen 10.241.0.2:22 -key $RUN/ssh/id_ed25519 -path $RUN/ssh/bin
//	nodessh -keygen -key FILE    write the key pair (FILE, FILE.pub) if missing, and exit
package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

const (
	// commandTimeout bounds one command: a kubelet stop or start waits at most a minute.
	commandTimeout = 3 * time.Minute
	// handshakeTimeout bounds a connection's SSH handshake.
	handshakeTimeout = 10 * time.Second
)

func main() {
	listen := flag.String("listen", "", "address to listen on (NODE_IP:22)")
	keyFile := flag.String("key", "", "the client's private key (OpenSSH format); its public key is the only one accepted")
	pathDir := flag.String("path", "", "directory put first in the commands' PATH (the systemctl and sudo stand-ins)")
	keygen := flag.Bool("keygen", false, "write -key and -key.pub if missing, then exit")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *keyFile == "" {
		fmt.Fprintln(os.Stderr, "nodessh: -key is required")
		os.Exit(2)
	}
	if err := ensureKey(*keyFile); err != nil {
		fmt.Fprintln(os.Stderr, "nodessh:", err)
		os.Exit(1)
	}
	if *keygen {
		return
	}
	if *listen == "" {
		fmt.Fprintln(os.Stderr, "nodessh: -listen is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, log, *listen, *keyFile, *pathDir); err != nil {
		log.Error("nodessh", "err", err)
		os.Exit(1)
	}
}

// ensureKey writes an ed25519 key pair to file and file.pub unless file exists.
func ensureKey(file string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(priv, "gcsfuse-csi local cluster")
	if err != nil {
		return err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return err
	}
	if err := os.WriteFile(file+".pub", ssh.MarshalAuthorizedKey(sshPub), 0o644); err != nil {
		return err
	}
	return os.WriteFile(file, pem.EncodeToMemory(block), 0o600)
}

// serve accepts connections until ctx ends, then closes the listener and waits for the
// connections' goroutines.
func serve(ctx context.Context, log *slog.Logger, addr, keyFile, pathDir string) error {
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	client, err := ssh.ParsePrivateKey(raw)
	if err != nil {
		return fmt.Errorf("key %s: %w", keyFile, err)
	}
	allowed := client.PublicKey().Marshal()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	host, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		return err
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if bytes.Equal(k.Marshal(), allowed) {
			return &ssh.Permissions{}, nil
		}
		return nil, errors.New("key not authorized")
	}}
	cfg.AddHostKey(host)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Info("listening", "addr", addr)
	var wg sync.WaitGroup
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			handle(ctx, log, c, cfg, pathDir)
		}()
	}
}

// handle runs one connection: its session channels, one command each.
func handle(ctx context.Context, log *slog.Logger, c net.Conn, cfg *ssh.ServerConfig, pathDir string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		log.Warn("handshake", "remote", c.RemoteAddr(), "err", err)
		return
	}
	_ = c.SetDeadline(time.Time{})
	defer conn.Close()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			return
		}
		session(ctx, log, ch, requests, pathDir)
	}
}

// session answers a session's requests: the first "exec" runs, anything else is refused.
func session(ctx context.Context, log *slog.Logger, ch ssh.Channel, requests <-chan *ssh.Request, pathDir string) {
	defer ch.Close()
	for req := range requests {
		if req.Type != "exec" || len(req.Payload) < 4 {
			_ = req.Reply(false, nil)
			continue
		}
		n := binary.BigEndian.Uint32(req.Payload)
		if int(n) > len(req.Payload)-4 {
			_ = req.Reply(false, nil)
			continue
		}
		cmdline := string(req.Payload[4 : 4+n])
		_ = req.Reply(true, nil)
		code := run(ctx, log, ch, cmdline, pathDir)
		status := make([]byte, 4)
		binary.BigEndian.PutUint32(status, uint32(code))
		_, _ = ch.SendRequest("exit-status", false, status)
		return
	}
}

// run runs cmdline with bash, its output to the channel, and returns its exit code.
func run(ctx context.Context, log *slog.Logger, ch ssh.Channel, cmdline, pathDir string) int {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", cmdline)
	cmd.Env = append(os.Environ(), "PATH="+pathDir+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	start := time.Now()
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
		if code < 0 {
			code = 128 + int(syscall.SIGKILL)
		}
	case err != nil:
		fmt.Fprintf(ch.Stderr(), "nodessh: %v\n", err)
		code = 127
	}
	log.Info("ran", "command", cmdline, "code", code, "took", time.Since(start).Round(time.Millisecond))
	return code
}
