// Command admission measures what the webhook costs the admission of pods that are not the
// driver's, on a cluster full of another driver's volumes (hack/admission.sh brings the local
// cluster up and runs it).
//
// Every pod with a claim goes to the webhook (its claim may be the driver's), so every
// local-PV StatefulSet pod of a cluster pays for the webhook's look-ups. This program makes
// the setting where that cost showed: -pvs PersistentVolumes of another driver (default
// 10,000) and -claims pending claims of a class that provisions nothing
// (kubernetes.io/no-provisioner, WaitForFirstConsumer: a local-PV StatefulSet's). Then, in
// -rounds rounds, each case one after the other, it times server-side dry-run creates of a
// pod (the API server's admission, webhooks included, and nothing stored):
//
//   - no claim: an emptyDir pod, which no webhook entry matches (the floor);
//   - pending claim: a pod using one of the claims, all older than the webhook's 30 s
//     (webhook.livePreboundRecent): the webhook resolves it from its caches and a GET or two;
//   - new claim: a claim created just before its pod, the case for which the webhook may list
//     the volumes live (a volume pre-bound to a claim made with it may not be in its cache
//     yet), at most webhook.LiveListRate a second;
//   - gcsfuse claim: a pod using a claim bound to a PersistentVolume of the driver, injected:
//     the cost of an admission that does something, for scale.
//
// For each case it prints n, p50, p90, p99 and max of the Create call, the p50's difference
// from the no-claim floor, and the API calls per admission on PersistentVolumes,
// PersistentVolumeClaims and StorageClasses (GET and LIST: the webhook's live reads; the
// deltas of the API server's apiserver_request_total around each case's samples, so the
// other components' reads in that window count too, which is what the API server pays). It
// asserts nothing: the figures are for docs/architecture.md and the issue. The API server's
// counts are one server's: on a cluster of several, run it against one of them. Everything it made
// is deleted at the end (the PersistentVolumes by label, one call), unless -keep.
//
// Every connection goes to the API server on the cluster's veth (dialguard refuses any other
// address); every loop and wait is bounded.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dialguard"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/quantile"
)

const (
	namespace = "admission-bench"
	// label is on every PersistentVolume this program makes: one DeleteCollection takes them.
	label       = "gcsfuse-csi.bench/admission"
	localClass  = "admission-bench-local" // no-provisioner, WaitForFirstConsumer
	otherClass  = "admission-bench-other" // the other driver's volumes' class
	otherDriver = "other.csi.example.com"
	ourDriver   = "gcsfuse.csi.storage"

	// claimsSettled: the claims must be older than the webhook's livePreboundRecent (30 s)
	// for the "pending claim" case, with a margin for the clocks of one machine.
	claimsSettled = 35 * time.Second
	createWorkers = 8
	callTimeout   = 30 * time.Second
	// setupTimeout bounds making (and deleting) the volumes and claims.
	setupTimeout = 20 * time.Minute
	// apiQPS and apiBurst: client-go's defaults (5, 10) would make 10,000 creates take half
	// an hour; the API server, not this client, is what is measured.
	apiQPS, apiBurst = 500, 1000
)

// counted are the (resource, verb) pairs whose requests are counted per admission.
var counted = []struct{ resource, verb string }{
	{"persistentvolumeclaims", "GET"}, {"persistentvolumes", "GET"}, {"persistentvolumes", "LIST"},
	{"storageclasses", "GET"}, {"storageclasses", "LIST"},
}

type options struct {
	kubeconfig  string
	pvs, claims int
	n, fresh    int
	rounds      int
	keep        bool
}

func main() { os.Exit(run()) }

func run() int {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the local cluster's kubeconfig")
	flag.IntVar(&o.pvs, "pvs", 10000, "PersistentVolumes of another driver to make")
	flag.IntVar(&o.claims, "claims", 200, "pending claims of a no-provisioner class to make")
	flag.IntVar(&o.n, "n", 200, "samples per case (no claim, pending claim, gcsfuse claim)")
	flag.IntVar(&o.fresh, "fresh", 40, "samples of the new-claim case (each makes a claim)")
	flag.IntVar(&o.rounds, "rounds", 4, "rounds: each case's samples are split among them, the cases interleaved")
	flag.BoolVar(&o.keep, "keep", false, "leave the volumes, claims and namespace in place")
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "admission:", err)
		return 2
	}
	cfg, _, err := dialguard.ClientConfig(o.kubeconfig, apiQPS, apiBurst)
	if err != nil {
		fmt.Fprintln(os.Stderr, "admission:", err)
		return 1
	}
	// The webhook warns of each pending claim that it may be the driver's: 600 lines here.
	cfg.WarningHandler = rest.NoWarnings{}
	b := &bench{cs: kubernetes.NewForConfigOrDie(cfg), o: o}
	ctx, cancel := context.WithTimeout(context.Background(), 2*setupTimeout+time.Duration(o.rounds)*10*time.Minute)
	defer cancel()
	err = b.main(ctx)
	if !o.keep {
		if cerr := b.cleanup(); cerr != nil {
			fmt.Fprintln(os.Stderr, "admission: cleanup:", cerr)
			err = errors.Join(err, cerr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "admission:", err)
		return 1
	}
	return 0
}

func (o options) validate() error {
	switch {
	case o.kubeconfig == "":
		return errors.New("-kubeconfig (or KUBECONFIG) is required")
	case o.pvs < 0 || o.claims < 1 || o.n < 1 || o.fresh < 0 || o.rounds < 1:
		return fmt.Errorf("-pvs >= 0, -claims >= 1, -n >= 1, -fresh >= 0 and -rounds >= 1; got %d, %d, %d, %d, %d",
			o.pvs, o.claims, o.n, o.fresh, o.rounds)
	case o.n < o.rounds:
		return fmt.Errorf("-n %d is fewer than -rounds %d", o.n, o.rounds)
	}
	return nil
}

type bench struct {
	cs kubernetes.Interface
	o  options
}

// result is one case's figures, summed over the rounds.
type result struct {
	name  string
	lat   []time.Duration
	calls map[string]float64 // "verb resource" -> requests
}

func (b *bench) main(ctx context.Context) error {
	t0 := time.Now()
	if err := b.setup(ctx); err != nil {
		return err
	}
	fmt.Printf("admission: [%s] %d PersistentVolumes of %s, %d pending claims of a no-provisioner class\n",
		time.Since(t0).Round(time.Second), b.o.pvs, otherDriver, b.o.claims)
	cases := []struct {
		name string
		n    int
		pod  func(ctx context.Context, i int) (*corev1.Pod, error)
	}{
		{"no claim (no webhook call)", b.o.n, func(context.Context, int) (*corev1.Pod, error) { return b.pod(nil), nil }},
		{"pending claim, > 30 s old", b.o.n, func(_ context.Context, i int) (*corev1.Pod, error) {
			return b.pod(claimVolume(fmt.Sprintf("local-%04d", i%b.o.claims))), nil
		}},
		{"new claim (may list live)", b.o.fresh, func(ctx context.Context, i int) (*corev1.Pod, error) {
			// Named for this run: one that a -keep run left is not new.
			name := fmt.Sprintf("new-%d-%04d", t0.Unix(), i)
			if err := b.createClaim(ctx, name, localClass); err != nil {
				return nil, err
			}
			return b.pod(claimVolume(name)), nil
		}},
		{"gcsfuse claim (injected)", b.o.n, func(context.Context, int) (*corev1.Pod, error) {
			return b.pod(claimVolume("gcsfuse")), nil
		}},
	}
	results := make([]result, len(cases))
	for i, c := range cases {
		results[i] = result{name: c.name, calls: map[string]float64{}}
	}
	for r := range b.o.rounds {
		for ci, c := range cases {
			from, to := c.n*r/b.o.rounds, c.n*(r+1)/b.o.rounds
			before, err := b.requests(ctx)
			if err != nil {
				return err
			}
			for i := from; i < to; i++ {
				pod, err := c.pod(ctx, i)
				if err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				d, err := b.dryRun(ctx, pod)
				if err != nil {
					return fmt.Errorf("%s: dry-run create: %w", c.name, err)
				}
				results[ci].lat = append(results[ci].lat, d)
			}
			after, err := b.requests(ctx)
			if err != nil {
				return err
			}
			for k, v := range after {
				results[ci].calls[k] += v - before[k]
			}
		}
		fmt.Printf("admission: [%s] round %d of %d\n", time.Since(t0).Round(time.Second), r+1, b.o.rounds)
	}
	fmt.Print("\n" + table(results))
	return nil
}

// table prints each case's latency figures and API calls per admission.
func table(results []result) string {
	var w strings.Builder
	w.WriteString("| pod's admission (server-side dry-run create) | n | p50 | p90 | p99 | max | p50 - no claim's | API calls per admission (PV, PVC, StorageClass) |\n")
	w.WriteString("|---|---|---|---|---|---|---|---|\n")
	var floor time.Duration
	for i, r := range results {
		if len(r.lat) == 0 {
			continue
		}
		s := slices.Clone(r.lat)
		slices.Sort(s)
		p50 := quantile.Nearest(s, 0.5)
		if i == 0 {
			floor = p50
		}
		fmt.Fprintf(&w, "| %s | %d | %s | %s | %s | %s | %+.1f ms | %s |\n", r.name, len(s), ms(p50),
			ms(quantile.Nearest(s, 0.9)), ms(quantile.Nearest(s, 0.99)), ms(s[len(s)-1]),
			float64(p50-floor)/float64(time.Millisecond), callsPer(r.calls, len(s)))
	}
	return w.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// callsPer is calls divided by n admissions, the non-zero ones: "0" when none.
func callsPer(calls map[string]float64, n int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(calls)) {
		if v := calls[k] / float64(n); v >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, v))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// dryRun times a server-side dry-run create of pod.
func (b *bench) dryRun(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	start := time.Now()
	_, err := b.cs.CoreV1().Pods(namespace).Create(c, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return time.Since(start), err
}

// requests are the API server's request counts (apiserver_request_total) of the counted
// resources and verbs, keyed "VERB resource".
func (b *bench) requests(ctx context.Context) (map[string]float64, error) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(c)
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	return requestCounts(mfs["apiserver_request_total"]), nil
}

// requestCounts sums mf's counters by "VERB resource" over the counted pairs (every other
// label: code, scope, dry_run, component, version).
func requestCounts(mf *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if mf == nil {
		return out
	}
	for _, m := range mf.Metric {
		var res, verb, sub string
		for _, lp := range m.Label {
			switch lp.GetName() {
			case "resource":
				res = lp.GetValue()
			case "verb":
				verb = lp.GetValue()
			case "subresource":
				sub = lp.GetValue()
			}
		}
		for _, c := range counted {
			if c.resource == res && c.verb == verb && sub == "" {
				out[verb+" "+res] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------- objects

func (b *bench) pod(vol *corev1.Volume) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.invalid/app:1", Command: []string{"true"},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/v"}},
			}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if vol != nil {
		p.Spec.Volumes[0] = *vol
	}
	return p
}

func claimVolume(claim string) *corev1.Volume {
	return &corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func (b *bench) createClaim(ctx context.Context, name, class string) error {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if class == "" {
		pvc.Spec.VolumeName = "admission-bench-gcsfuse"
	}
	_, err := b.cs.CoreV1().PersistentVolumeClaims(namespace).Create(c, pvc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (b *bench) createPV(ctx context.Context, name, driver, class string, claimRef *corev1.ObjectReference) error {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "1"}},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			ClaimRef:         claimRef,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: name, VolumeAttributes: map[string]string{"bucket": "admission-bench"}}},
		},
	}
	_, err := b.cs.CoreV1().PersistentVolumes().Create(c, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// setup makes the namespace, the classes, the other driver's volumes, the pending claims
// and the gcsfuse claim (bound to a volume of the driver, pre-bound both ways), then waits
// until the claims are older than the webhook's live-list window. It is idempotent: a run
// after -keep finds what it made.
func (b *bench) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := b.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace: %w", err)
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: localClass}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc},
		{ObjectMeta: metav1.ObjectMeta{Name: otherClass}, Provisioner: otherDriver},
	} {
		if _, err := b.cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("StorageClass %s: %w", sc.Name, err)
		}
	}
	if err := parallel(ctx, b.o.pvs, func(ctx context.Context, i int) error {
		return b.createPV(ctx, fmt.Sprintf("admission-bench-%05d", i), otherDriver, otherClass, nil)
	}); err != nil {
		return fmt.Errorf("PersistentVolumes: %w", err)
	}
	if err := parallel(ctx, b.o.claims, func(ctx context.Context, i int) error {
		return b.createClaim(ctx, fmt.Sprintf("local-%04d", i), localClass)
	}); err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	ref := &corev1.ObjectReference{Namespace: namespace, Name: "gcsfuse"}
	if err := b.createPV(ctx, "admission-bench-gcsfuse", ourDriver, "", ref); err != nil {
		return fmt.Errorf("the driver's PersistentVolume: %w", err)
	}
	if err := b.createClaim(ctx, "gcsfuse", ""); err != nil {
		return fmt.Errorf("the driver's claim: %w", err)
	}
	fmt.Printf("admission: waiting %s for the claims to be older than the webhook's live-list window\n", claimsSettled)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(claimsSettled):
	}
	return nil
}

// parallel runs f for 0..n-1 on createWorkers goroutines, which all end before it returns;
// the first error stops the rest.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(fmt.Errorf("%d: %w", i, err))
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// cleanup deletes the volumes (one DeleteCollection by label), the namespace (its claims
// with it) and the classes, and waits, bounded, for the volumes to be gone.
func (b *bench) cleanup() error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: label}
	errs := []error{b.cs.CoreV1().PersistentVolumes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel)}
	if err := b.cs.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	for _, sc := range []string{localClass, otherClass} {
		if err := b.cs.StorageV1().StorageClasses().Delete(ctx, sc, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := b.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: label, Limit: 1})
		return err == nil && len(l.Items) == 0, nil
	}))
	return errors.Join(errs...)
}
