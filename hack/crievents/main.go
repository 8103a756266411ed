// Command crievents tells whether a CRI runtime serves the container event stream
// (RuntimeService.GetContainerEvents, which the kubelet's evented PLEG uses): it opens the
// stream and prints each event that arrives within -wait. It prints "served" and exits 0
// when the stream stayed open for -wait, or delivered -events events; "unimplemented" and
// exits 3 when the runtime does not know the call (containerd 1.6); exits 1 on any other
// error. hack/cluster-up.sh runs it against the cluster's containerd.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///run/containerd/containerd.sock", "CRI endpoint")
	wait := flag.Duration("wait", 2*time.Second, "how long to keep the stream open")
	events := flag.Int("events", 0, "stop after this many events (0: wait the whole -wait); fewer is an error")
	flag.Parse()
	os.Exit(run(*endpoint, *wait, *events))
}

// run reads the stream with the node plugin's own client (containerexit), so this check
// and the node plugin agree on what "served" means.
func run(endpoint string, wait time.Duration, want int) int {
	rt, err := containerexit.Dial(endpoint)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crievents:", err)
		return 1
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	n := 0
	err = rt.Events(ctx, func(ev containerexit.Event) {
		n++
		fmt.Printf("event %s container %.12s pod %s\n", ev.Kind, ev.ContainerID, ev.PodUID)
		if want > 0 && n >= want {
			cancel()
		}
	})
	switch {
	case errors.Is(err, containerexit.ErrNoEvents):
		fmt.Printf("GetContainerEvents: unimplemented (%v)\n", err)
		return 3
	case err != nil:
		fmt.Fprintln(os.Stderr, "crievents:", err)
		return 1
	case want > 0 && n >= want:
		fmt.Printf("GetContainerEvents: served (%d events)\n", n)
		return 0
	case want > 0:
		fmt.Printf("GetContainerEvents: served, but %d of %d events in %s\n", n, want, wait)
		return 1
	}
	fmt.Printf("GetContainerEvents: served (stream open for %s, %d events)\n", wait, n)
	return 0
}
