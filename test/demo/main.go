// Command demo (hack/demo.sh) shows the driver end to end on this machine, with no cluster: the
// embedded GCS emulator, the node plugin's CSI service, the real sidecar (uid 65534) and the
// real gcsfuse on /dev/fuse. For each sidecar mode it mounts a bucket into a "pod", runs an
// Airflow-style task as a separate process that writes its result and exits, and ends the
// sidecar by each of its two triggers: native by the kubelet's SIGTERM (on a cluster the
// node plugin's exit file usually comes first, as soon as the runtime reports the app
// gone: hack/demo-cluster.sh shows that), legacy by the node plugin's pod watcher seeing
// the app's container terminate and writing the exit file. It prints the timings and the
// objects that reached the bucket.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitcoord"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

const bucket = "demo-bucket"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

type row struct {
	mode, trigger         string
	mountReady, appToExit time.Duration
	code                  int
}

func run() error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := testenv.New(testenv.Options{Buckets: []string{bucket}, Log: quiet})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Printf("GCS emulator at %s, bucket %q; gcsfuse %s\n\n", e.Emulator.Endpoint, bucket, e.GcsfuseBin)

	var rows []row
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		r, err := runPod(e, mode)
		if err != nil {
			return fmt.Errorf("%s pod: %w", mode, err)
		}
		rows = append(rows, r)
	}

	fmt.Printf("\n%-7s %-34s %12s %22s %10s\n", "mode", "how the sidecar was ended", "mount ready", "app exit -> sidecar exit", "exit code")
	for _, r := range rows {
		fmt.Printf("%-7s %-34s %12s %22s %10d\n", r.mode, r.trigger, ms(r.mountReady), ms(r.appToExit), r.code)
	}
	list, err := e.Emulator.ListObjectsWithOptionsPaginated(bucket, fakestorage.ListOptions{})
	if err != nil {
		return err
	}
	objs := list.Objects
	sort.Slice(objs, func(i, j int) bool { return objs[i].Name < objs[j].Name })
	fmt.Printf("\nobjects in gs://%s:\n", bucket)
	for _, o := range objs {
		full, err := e.Emulator.GetObject(bucket, o.Name)
		if err != nil {
			return err
		}
		fmt.Printf("  %-40s %8d bytes\n", o.Name, len(full.Content))
	}
	fmt.Println("\n(incumbent, measured with the same gcsfuse: 1.7 s to mount one volume; 5 s native / 5.5-9.5 s legacy to exit)")
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func runPod(e *testenv.Env, mode string) (row, error) {
	r := row{mode: mode}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod, err := e.NewPod()
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	if err := pod.Publish(ctx, "data", bucket, "implicit-dirs", false); err != nil {
		return r, fmt.Errorf("NodePublishVolume: %w", err)
	}
	sc, err := pod.StartSidecar(mode, 30, nil)
	if err != nil {
		return r, err
	}
	target := pod.Target("data")
	if _, err := testenv.WaitReady(target, 20*time.Second); err != nil {
		return r, fmt.Errorf("%w\n%s", err, sc.Output())
	}
	r.mountReady = time.Since(t0)
	fmt.Printf("[%s] bucket mounted at %s in %s (sidecar pid %d, uid 65534)\n", mode, target, ms(r.mountReady), sc.Cmd.Process.Pid)

	// The legacy pod's node plugin watches the pod through the API; here the API server is
	// client-go's fake, fed the status the kubelet would write.
	var client *fake.Clientset
	var k8sPod *corev1.Pod
	if mode == contract.ModeLegacy {
		k8sPod = pod.PodObject(corev1.RestartPolicyNever)
		client = fake.NewClientset(k8sPod)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		w := podwatch.New(client, "test-node", &exitcoord.ExitCoordinator{KubeletRoot: e.Root, Log: quiet}, podwatch.WithLogger(quiet))
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { _ = w.Run(wctx) }() // ends with wctx
	}

	// The task: a separate process writes its result and a data file, closes them and exits.
	dir := filepath.Join(target, "runs", mode)
	script := fmt.Sprintf(`mkdir -p %[1]s && date -u +'{"task":"demo","mode":"%[2]s","finished":"%%FT%%TZ"}' > %[1]s/result.json && head -c 4194304 /dev/urandom > %[1]s/output.bin`, dir, mode)
	if out, err := exec.CommandContext(ctx, "sh", "-c", script).CombinedOutput(); err != nil {
		return r, fmt.Errorf("task: %v: %s", err, out)
	}
	appExit := time.Now()
	fmt.Printf("[%s] task wrote %s/result.json and output.bin and exited\n", mode, dir)

	if mode == contract.ModeNative {
		r.trigger = "kubelet SIGTERM after app exit"
		if err := sc.Signal(syscall.SIGTERM); err != nil {
			return r, err
		}
	} else {
		r.trigger = "pod watcher -> exit file"
		testenv.AppTerminated(k8sPod, 0, appExit)
		if _, err := client.CoreV1().Pods(k8sPod.Namespace).UpdateStatus(ctx, k8sPod, metav1.UpdateOptions{}); err != nil {
			return r, err
		}
	}
	r.code, err = sc.Wait(10 * time.Second)
	if err != nil {
		return r, fmt.Errorf("%w\n%s", err, sc.Output())
	}
	r.appToExit = sc.Exited.Sub(appExit)
	fmt.Printf("[%s] sidecar exited with code %d, %s after the task\n", mode, r.code, ms(r.appToExit))
	if err := pod.Unpublish(ctx, "data"); err != nil {
		return r, fmt.Errorf("NodeUnpublishVolume: %w", err)
	}
	return r, nil
}
