// Command gcs-emulator serves an in-memory GCS API (fake-gcs-server) for the demo, the tests
// and local clusters.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/emulator"
)

func main() {
	host := flag.String("host", "127.0.0.1", "address to listen on and advertise")
	port := flag.Int("port", 4443, "port to listen on")
	buckets := flag.String("buckets", "", "comma-separated buckets to create at start")
	flag.Parse()
	var bs []string
	for _, b := range strings.Split(*buckets, ",") {
		if b = strings.TrimSpace(b); b != "" {
			bs = append(bs, b)
		}
	}
	srv, err := emulator.Start(*host, *port, bs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gcs-emulator:", err)
		os.Exit(1)
	}
	slog.Info("GCS emulator ready", "endpoint", srv.Endpoint, "buckets", bs)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Stop()
}
