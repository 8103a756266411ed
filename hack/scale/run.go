package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/promrun"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

type scale struct {
	cs  kubernetes.Interface
	gcs *http.Client
	// dial is the guarded dialer every client uses; prom the Prometheus scraping the node
	// plugin (set once the node plugin is found).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	prom *promrun.Server
	opts options
	ns   string
	// n is the pods per run (opts.n, or the node's free pod slots).
	n       int
	buckets []string
}

// report is what ends the program: leaks and losses are listed and make it exit 1. setting
// and tables are the figures (the run's setting and the Markdown tables), for -markdown too.
type report struct {
	leaks, losses   []string
	setting, tables string
}

func (r *report) lose(format string, a ...any) {
	r.losses = append(r.losses, fmt.Sprintf(format, a...))
}

func (s *scale) main(ctx context.Context) (*report, error) {
	rep := &report{}
	node, onNode, err := s.node(ctx)
	if err != nil {
		return nil, err
	}
	allocatable := node.Status.Allocatable.Pods().Value()
	free, err := fillCount(allocatable, len(onNode))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w (pods on it: %s)", node.Name, err, strings.Join(onNode, ", "))
	}
	s.n = free
	if s.opts.n > 0 {
		if s.opts.n > free {
			return nil, fmt.Errorf("-n %d: node %s has %d free pod slots (allocatable %d, %d pods on it: %s); pods beyond them would queue, not run",
				s.opts.n, node.Name, free, allocatable, len(onNode), strings.Join(onNode, ", "))
		}
		s.n = s.opts.n
	}
	fmt.Printf("scale: node %s: allocatable pods (the kubelet's maxPods) %d, %d already on it (%s): %d free; %d pods per run (%d with two volumes, %d with one)\n",
		node.Name, allocatable, len(onNode), strings.Join(onNode, ", "), free, s.n, twoVolumePods(s.n), s.n-twoVolumePods(s.n))

	s.ns = fmt.Sprintf("scale-%d", rand.IntN(1e6))
	if _, err := s.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_ = s.cs.CoreV1().Namespaces().Delete(c, s.ns, metav1.DeleteOptions{})
	}()
	if err := s.waitNamespaceReady(ctx); err != nil {
		return nil, err
	}
	s.buckets = []string{fmt.Sprintf("scale-a-%d", rand.IntN(1e6)), fmt.Sprintf("scale-b-%d", rand.IntN(1e6))}
	for _, b := range s.buckets {
		if err := s.createBucket(ctx, b); err != nil {
			return nil, err
		}
	}
	fmt.Printf("scale: namespace %s, buckets %v, %d bytes per volume; waves of %d (0: none) %s apart; soak of %d Jobs (%d at a time, %d bytes each)\n",
		s.ns, s.buckets, s.opts.size, s.opts.wave, s.opts.waveGap, s.opts.jobs, s.opts.jobsParallel, s.opts.jobB)

	np, err := s.nodePlugin(ctx)
	if err != nil {
		return nil, err
	}
	stopProm, err := s.startPrometheus(ctx)
	if err != nil {
		return nil, err
	}
	defer stopProm()
	before, err := s.snapshot(ctx, np)
	if err != nil {
		return nil, fmt.Errorf("leak snapshot before the runs: %w", err)
	}

	t0 := time.Now()
	fmt.Printf("scale: [%s] admission burst: %d opted-in pods that no node takes\n", since(t0), s.n)
	burst, err := s.admissionBurst(ctx)
	if err != nil {
		return nil, err
	}
	modes := []runSpec{{name: "burst"}}
	if s.opts.wave > 0 {
		modes = append(modes, runSpec{name: "waves", wave: s.opts.wave, gap: s.opts.waveGap})
	}
	var runs []pairedRun
	for _, m := range modes {
		var pr pairedRun
		for _, volumes := range []bool{false, true} {
			spec := m
			spec.volumes = volumes
			fmt.Printf("scale: [%s] %s\n", since(t0), spec.describe(s.n))
			r, err := s.runPods(ctx, np, spec)
			if err != nil {
				return nil, err
			}
			r.report(rep)
			if volumes {
				pr.vol = r
			} else {
				pr.twin = r
			}
		}
		runs = append(runs, pr)
	}
	var soak *soakResult
	if s.opts.jobs > 0 {
		fmt.Printf("scale: [%s] soak: %d Jobs, %d at a time\n", since(t0), s.opts.jobs, s.opts.jobsParallel)
		soak, err = s.soak(ctx, np)
		if err != nil {
			return nil, err
		}
		soak.report(rep)
	}
	var shared *sharedResult
	if s.opts.sharedPods > 0 {
		fmt.Printf("scale: [%s] shared mount mode: %d pods of one key, and their twin\n", since(t0), s.opts.sharedPods)
		shared, err = s.sharedPhase(ctx)
		if err != nil {
			return nil, err
		}
		shared.report(rep)
	}
	fmt.Printf("scale: [%s] runs done; everything deleted; the node settles (at most %s) before the leaks are counted\n", since(t0), s.opts.settle)
	if err := s.deleteAll(ctx); err != nil {
		return nil, err
	}
	leaks, settled, err := s.settle(ctx, np, before)
	if err != nil {
		return nil, err
	}
	np2, err := s.nodePlugin(ctx)
	switch {
	case err != nil:
		rep.lose("node plugin after the runs: %v", err)
	case np2.pid != np.pid || np2.restarts != np.restarts:
		rep.lose("node plugin restarted during the runs (pid %d -> %d, restarts %d -> %d): its goroutine and fd counts compare two processes", np.pid, np2.pid, np.restarts, np2.restarts)
	}
	for _, l := range leaks {
		if l.leaked() {
			rep.leaks = append(rep.leaks, l.String())
		}
	}

	total := since(t0)
	rep.setting = fmt.Sprintf("maxPods %d, %d pods already on it -> %d pods per run (%d with two volumes, %d with one), %d bytes per volume; twin: the same pods with emptyDirs for volumes; total %s",
		allocatable, len(onNode), s.n, twoVolumePods(s.n), s.n-twoVolumePods(s.n), s.opts.size, total)
	var tables strings.Builder
	printLatencies(&tables, burst, runs, soak)
	printFigures(&tables, runs, soak)
	if shared != nil {
		shared.print(&tables)
	}
	printLeaks(&tables, leaks, settled)
	rep.tables = tables.String()
	fmt.Printf("\n=== scale: node %s, %s\n", node.Name, rep.setting)
	fmt.Print(rep.tables)
	for _, l := range leaks {
		if l.leaked() {
			fmt.Println("leaked:", l)
		}
	}
	return rep, nil
}

func since(t time.Time) string { return time.Since(t).Round(time.Second).String() }

// node returns the cluster's only node and the pods already on it (not terminated: the kubelet
// and the scheduler count only those against maxPods), as namespace/name.
func (s *scale) node(ctx context.Context) (*corev1.Node, []string, error) {
	nodes, err := s.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	if len(nodes.Items) != 1 {
		return nil, nil, fmt.Errorf("%d nodes: filling the node needs the local single-node cluster", len(nodes.Items))
	}
	node := &nodes.Items[0]
	pods, err := s.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		return nil, nil, err
	}
	return node, activeOn(pods.Items, node.Name), nil
}

// activeOn lists, as namespace/name, the pods bound to node that are not terminated.
func activeOn(pods []corev1.Pod, node string) []string {
	var out []string
	for _, p := range pods {
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p.Namespace+"/"+p.Name)
	}
	slices.Sort(out)
	return out
}

// fillCount is how many pods fill a node of allocatable pods on which active pods run. It
// needs room for at least one.
func fillCount(allocatable int64, active int) (int, error) {
	if allocatable <= 0 {
		return 0, fmt.Errorf("allocatable pods %d: the node reports no pod capacity", allocatable)
	}
	free := allocatable - int64(active)
	if free < 1 {
		return 0, fmt.Errorf("no free pod slot: allocatable %d, %d pods on the node", allocatable, active)
	}
	return int(free), nil
}

// twoVolumePods is how many of a run's n pods have two volumes (the even-numbered ones: half,
// rounded up); the others have one.
func twoVolumePods(n int) int { return (n + 1) / 2 }

// volumesOf is the number of volumes of a run's pod i.
func volumesOf(i int) int {
	if i%2 == 0 {
		return 2
	}
	return 1
}

func (s *scale) waitNamespaceReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, namespaceWait)
	defer cancel()
	for ctx.Err() == nil {
		_, errSA := s.cs.CoreV1().ServiceAccounts(s.ns).Get(ctx, "default", metav1.GetOptions{})
		_, errCM := s.cs.CoreV1().ConfigMaps(s.ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if errSA == nil && errCM == nil {
			return nil
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("namespace %s: no default service account after %s", s.ns, namespaceWait)
}

func (s *scale) createBucket(ctx context.Context, name string) error {
	body, _ := json.Marshal(map[string]string{"name": name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.opts.gcsURL+"/storage/v1/b?project=scale", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.gcs.Do(req)
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("create bucket %s: %s %s", name, resp.Status, msg)
	}
	return nil
}

// sidecarAnnotations opt a pod in, with the resources a full node has room for.
func sidecarAnnotations() map[string]string {
	return map[string]string{
		contract.AnnotationInject:     "true",
		contract.AnnotationCPURequest: sidecarCPURequest, contract.AnnotationCPULimit: "0",
		contract.AnnotationMemoryRequest: sidecarMemoryRequest, contract.AnnotationMemoryLimit: sidecarMemoryLimit,
		contract.AnnotationEphemeralStorageRequest: "0",
	}
}

// volumeNames name a pod's volumes and their mount paths ("/a", "/b").
var volumeNames = []string{"a", "b"}

// workloadSpec is the spec of one writer pod: vols volumes (1 or 2), the gcsfuse volume of
// buckets[i] each when buckets is set, else emptyDirs in their place (the twin); the app
// writes size bytes to object in each and exits.
func (s *scale) workloadSpec(object string, vols int, buckets []string, size int) corev1.PodSpec {
	args := []string{"write", "-dir", "/a", "-name", object, "-bytes", strconv.Itoa(size)}
	if vols == 2 {
		args = append(args, "-also", "/b")
	}
	spec := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  new(false),
		TerminationGracePeriodSeconds: new(int64(5)),
		Containers: []corev1.Container{{
			Name: "app", Image: s.opts.workloadImage, ImagePullPolicy: corev1.PullNever, Command: []string{"/workload"}, Args: args,
		}},
	}
	for i, v := range volumeNames[:vols] {
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/" + v})
		src := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		if buckets != nil {
			src = corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
				Driver: contract.DriverName, VolumeAttributes: map[string]string{contract.AttrBucketName: buckets[i]},
			}}
		}
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: v, VolumeSource: src})
	}
	return spec
}

// pod is a run's pod i.
func (s *scale) pod(run, name string, i int, volumes bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: map[string]string{runLabel: run}}}
	var buckets []string
	if volumes {
		buckets = s.buckets
		p.Annotations = sidecarAnnotations()
	}
	p.Spec = s.workloadSpec(name+".bin", volumesOf(i), buckets, s.opts.size)
	return p
}
