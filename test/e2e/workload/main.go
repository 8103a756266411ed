// Command workload is the e2e tests' application container (and the cluster's pause image):
// one small static binary, so the images need neither a base image nor a registry.
//
//	workload pause                          sleep until SIGTERM/SIGINT (pod sandbox)
//	workload write -dir D -name N -bytes B [-chunk-delay d] [-exit c] [-finish-on-term] [-fail-first-run] [-marker M] [-also D2] [-read-back] [-then d]
//	workload loop -dir D -prefix P -every d [-for d] [-read N -read-bytes B]
//	                                        write P-0, P-1, ... until SIGTERM or -for (and
//	                                        read and check N after each)
//	workload flush -dir D -name N -bytes B [-chunk-delay d]
//	                                        wait for SIGTERM, then write N (a log shipper's
//	                                        last batch, an app draining after its preStop)
//	workload read -dir D -name N[,N2...] -bytes B
//	                                        check that each file has the expected content
//	workload sleep -for d
//
// Every command but pause prints "START <unix-ms>" first and "EXIT <unix-ms> <code>" last, so
// a test can tell from the log when the application itself started and finished,
// independently of the kubelet's 1 s timestamps.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/testproxy"
)

// chunk is the write unit; Pattern fills it so the tests can verify content by size and
// MD5 without shipping the expected data.
const chunk = 64 << 10

// Pattern returns byte i of every file the workload writes.
func Pattern(i int64) byte { return byte(i % 251) }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: workload pause|write|loop|flush|read|sleep|proxy [flags]")
		os.Exit(2)
	}
	if os.Args[1] != "pause" {
		fmt.Printf("START %d\n", time.Now().UnixMilli())
	}
	code := run(os.Args[1], os.Args[2:])
	fmt.Printf("EXIT %d %d\n", time.Now().UnixMilli(), code)
	os.Exit(code)
}

func run(cmd string, args []string) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := fs.String("dir", "/data", "directory (a gcsfuse mount)")
	name := fs.String("name", "out.bin", "file name")
	size := fs.Int64("bytes", 1<<20, "file size")
	chunkDelay := fs.Duration("chunk-delay", 0, "sleep between 64 KiB chunks (a slow writer)")
	exitCode := fs.Int("exit", 0, "exit code after a successful write (non-zero simulates a failed task)")
	finishOnTerm := fs.Bool("finish-on-term", false, "on SIGTERM, finish the file being written before exiting")
	failFirst := fs.Bool("fail-first-run", false, "write: on the first run (no <name>.attempt marker in -dir yet) create the marker and exit 1, to exercise container restarts")
	marker := fs.String("marker", "", "write: first write and close this small file, so a test can see in the bucket that the writer has started")
	receipt := fs.Bool("receipt", false, "write: once the file is closed without error, write <name>.done holding its size: in the bucket, the proof that the app's close succeeded")
	prefix := fs.String("prefix", "part", "loop: file name prefix")
	every := fs.Duration("every", 500*time.Millisecond, "loop: interval between files")
	dur := fs.Duration("for", 0, "loop/sleep: how long (0: until SIGTERM for loop)")
	then := fs.Duration("then", 0, "write: keep working this long after the file is closed (or until SIGTERM), then exit")
	also := fs.String("also", "", "write: write the same file into this directory too (a second volume)")
	readBack := fs.Bool("read-back", false, "write: after closing the file, drop its cached pages and read it back through the mount (so gcsfuse reads exactly -bytes from the bucket)")
	readName := fs.String("read", "", "loop: after each file, read and check this file (of -read-bytes pattern bytes)")
	readBytes := fs.Int64("read-bytes", 1<<20, "loop: size of the -read file")
	listen := fs.String("listen", ":3128", "proxy: address to listen on")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	term := make(chan os.Signal, 4)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	switch cmd {
	case "pause":
		<-term
		return 0
	case "proxy":
		return serveProxy(*listen, term)
	case "sleep":
		select {
		case <-time.After(*dur):
		case s := <-term:
			fmt.Println("signal", s)
		}
		return 0
	case "write":
		if *failFirst {
			marker := filepath.Join(*dir, *name+".attempt")
			if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
				if err := os.WriteFile(marker, []byte("1"), 0o644); err != nil {
					fmt.Fprintf(os.Stderr, "marker: %v\n", err)
				}
				fmt.Println("first run: failing on purpose")
				return 1
			}
		}
		if *marker != "" {
			if err := os.WriteFile(filepath.Join(*dir, *marker), []byte("started\n"), 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "marker %s: %v\n", *marker, err)
				return 1
			}
		}
		start := time.Now()
		n, err := writeFile(filepath.Join(*dir, *name), *size, *chunkDelay, term, *finishOnTerm)
		if err != nil {
			fmt.Fprintf(os.Stderr, "write %s: %v (after %d bytes)\n", *name, err, n)
			return 1
		}
		fmt.Printf("wrote %s %d bytes in %s\n", *name, n, time.Since(start).Round(time.Millisecond))
		if *receipt {
			if err := os.WriteFile(filepath.Join(*dir, *name+".done"), []byte(strconv.FormatInt(n, 10)), 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "receipt of %s: %v\n", *name, err)
				return 1
			}
		}
		if *also != "" {
			if _, err := writeFile(filepath.Join(*also, *name), *size, *chunkDelay, term, *finishOnTerm); err != nil {
				fmt.Fprintf(os.Stderr, "write %s in %s: %v\n", *name, *also, err)
				return 1
			}
		}
		if *readBack {
			if err := dropCached(filepath.Join(*dir, *name)); err != nil {
				fmt.Fprintf(os.Stderr, "drop cached pages of %s: %v\n", *name, err)
				return 1
			}
			if err := readFile(filepath.Join(*dir, *name), *size); err != nil {
				fmt.Fprintf(os.Stderr, "read back %s: %v\n", *name, err)
				return 1
			}
			fmt.Printf("read back %s %d bytes ok\n", *name, *size)
		}
		// A workload's pod (a Deployment's) is deleted while it keeps working: it ends then.
		select {
		case <-time.After(*then):
		case s := <-term:
			fmt.Println("signal", s)
		}
		return *exitCode
	case "loop":
		return loop(*dir, *prefix, *size, *every, *dur, *readName, *readBytes, term)
	case "flush":
		s := <-term
		fmt.Printf("signal %s: flushing %s\n", s, *name)
		start := time.Now()
		n, err := writeFile(filepath.Join(*dir, *name), *size, *chunkDelay, nil, true)
		if err != nil {
			fmt.Fprintf(os.Stderr, "flush %s: %v (after %d bytes)\n", *name, err, n)
			return 1
		}
		fmt.Printf("flushed %s %d bytes in %s\n", *name, n, time.Since(start).Round(time.Millisecond))
		return 0
	case "read":
		for _, n := range strings.Split(*name, ",") {
			if err := readFile(filepath.Join(*dir, n), *size); err != nil {
				fmt.Fprintf(os.Stderr, "read %s: %v\n", n, err)
				return 1
			}
			fmt.Printf("read %s %d bytes ok\n", n, *size)
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown command %q\n", cmd)
	return 2
}

// errTerminated is returned when SIGTERM arrives and the writer does not finish on term.
var errTerminated = errors.New("terminated")

// writeFile writes size pattern bytes. With finishOnTerm a SIGTERM is logged and the file is
// completed and closed: the situation where the sidecar must keep serving during the grace
// period.
func writeFile(path string, size int64, delay time.Duration, term <-chan os.Signal, finishOnTerm bool) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, chunk)
	buf := make([]byte, chunk)
	var off int64
	for off < size {
		select {
		case s := <-term:
			fmt.Printf("signal %s at %d bytes; finishOnTerm=%v\n", s, off, finishOnTerm)
			if !finishOnTerm {
				f.Close()
				return off, errTerminated
			}
		default:
		}
		n := min(int64(chunk), size-off)
		for i := range n {
			buf[i] = Pattern(off + i)
		}
		if _, err := w.Write(buf[:n]); err != nil {
			f.Close()
			return off, err
		}
		off += n
		if delay > 0 {
			time.Sleep(delay)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return off, err
	}
	// Close is where gcsfuse uploads: its error is the one that matters.
	return off, f.Close()
}

// dropCached drops the kernel's cached pages of a file (they stay from the write), so that the
// next read goes to gcsfuse.
func dropCached(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

func readFile(path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	if int64(len(data)) != size {
		return fmt.Errorf("size %d, want %d", len(data), size)
	}
	want := make([]byte, size)
	for i := range want {
		want[i] = Pattern(int64(i))
	}
	if !bytes.Equal(data, want) {
		return errors.New("content differs from the pattern")
	}
	return nil
}

func loop(dir, prefix string, size int64, every, dur time.Duration, readName string, readBytes int64, term <-chan os.Signal) int {
	var deadline <-chan time.Time
	if dur > 0 {
		deadline = time.After(dur)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		name := prefix + "-" + strconv.Itoa(i)
		// The file in progress is always finished: a writer stopped mid-file is the
		// application's bug, not what these tests are about.
		if _, err := writeFile(filepath.Join(dir, name), size, 0, nil, true); err != nil {
			fmt.Fprintf(os.Stderr, "write %s: %v\n", name, err)
			return 1
		}
		fmt.Printf("wrote %s at %d\n", name, time.Now().UnixMilli())
		if readName != "" {
			if err := readFile(filepath.Join(dir, readName), readBytes); err != nil {
				fmt.Fprintf(os.Stderr, "read %s: %v\n", readName, err)
				return 1
			}
			fmt.Printf("read %s at %d\n", readName, time.Now().UnixMilli())
		}
		select {
		case s := <-term:
			fmt.Printf("signal %s after %d files\n", s, i+1)
			return 0
		case <-deadline:
			fmt.Printf("done after %d files\n", i+1)
			return 0
		case <-tick.C:
		}
	}
}

// serveProxy is a forward (absolute-URI) and CONNECT proxy for the e2e tests: it logs one
// line per request, "PROXY <method> <target>", and resolves names as the pod does (its
// /etc/hosts: the test gives it hostAliases), until SIGTERM.
func serveProxy(addr string, term <-chan os.Signal) int {
	p := &testproxy.Proxy{Log: func(line string) { fmt.Printf("PROXY %s\n", line) }}
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: 10 * time.Second, Handler: p}
	errs := make(chan error, 1)
	go func() { errs <- srv.ListenAndServe() }()
	fmt.Println("proxy listening on", addr)
	select {
	case err := <-errs:
		fmt.Fprintln(os.Stderr, "proxy:", err)
		return 1
	case <-term:
		_ = srv.Close()
		return 0
	}
}
