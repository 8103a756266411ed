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
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///run/containerd/containerd.sock", "CRI endpoint")
	wait := flag.Duration("wait", 2*time.Second, "how long to keep the stream open")
	events := flag.Int("events", 0, "stop after this many events (0: wait the whole -wait); fewer is an error")
	flag.Parse()
	os.Exit(run(*endpoint, *wait, *events))
}

func run(endpoint string, wait time.Duration, want int) int {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crievents:", err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	stream, err := runtimeapi.NewRuntimeServiceClient(conn).GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	n := 0
	for err == nil {
		var ev *runtimeapi.ContainerEventResponse
		if ev, err = stream.Recv(); err == nil {
			n++
			fmt.Printf("event %s container %.12s pod %s/%s\n", ev.GetContainerEventType(), ev.GetContainerId(),
				ev.GetPodSandboxStatus().GetMetadata().GetNamespace(), ev.GetPodSandboxStatus().GetMetadata().GetName())
			if want > 0 && n >= want {
				fmt.Printf("GetContainerEvents: served (%d events)\n", n)
				return 0
			}
		}
	}
	switch {
	case status.Code(err) == codes.Unimplemented:
		fmt.Printf("GetContainerEvents: unimplemented (%s)\n", status.Convert(err).Message())
		return 3
	case status.Code(err) == codes.DeadlineExceeded && want == 0:
		fmt.Printf("GetContainerEvents: served (stream open for %s, %d events)\n", wait, n)
		return 0
	case status.Code(err) == codes.DeadlineExceeded:
		fmt.Printf("GetContainerEvents: served, but %d of %d events in %s\n", n, want, wait)
		return 1
	case errors.Is(err, io.EOF):
		fmt.Printf("GetContainerEvents: the runtime closed the stream after %d events\n", n)
		return 1
	}
	fmt.Fprintln(os.Stderr, "crievents:", err)
	return 1
}
