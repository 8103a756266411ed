// Package metricscatalog declares every metric family the driver's own code exports, once:
// its name, type, help, labels, histogram buckets and who serves it. The packages that
// record them build their collectors from these declarations (Family.NewCounterVec and the
// like), the reference (docs/reference.md, hack/reference) and the dashboard test read All,
// and test/layout refuses a metric declared anywhere else. gcsfuse's own families, which
// the node plugin re-exports per volume, are pkg/gcsfusemetrics.Families. The controller's
// are built and recorded by the provisioning library (sig-storage-lib-external-provisioner's
// controller/metrics); ControllerFamilies declares them for the reference, and the
// controller's test fails when the library's differ.
package metricscatalog

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is a family's Prometheus type.
type Kind string

// The kinds used here.
const (
	Counter   Kind = "counter"
	Gauge     Kind = "gauge"
	Histogram Kind = "histogram"
)

// The exporters: the node plugin's /metrics (cmd/gcsfuse-csi-node --metrics-addr) serves
// All, the controller's (cmd/gcsfuse-csi-controller --metrics-addr) ControllerFamilies.
const (
	NodePlugin = "node plugin"
	Controller = "controller"
)

// Family is one metric family.
type Family struct {
	Name string
	Kind Kind
	Help string
	// Labels are its variable labels, in order; nil for a single series.
	Labels []string
	// Buckets are a histogram's upper bounds, in seconds.
	Buckets []float64
	// Exporter is the component that serves it.
	Exporter string
}

// Buckets of the histograms.
var (
	// exitBuckets span 10 ms to 60 s: an exit driven by the node plugin should take well
	// under a second, while one that waits for the kubelet's grace period shows up in the
	// tail.
	exitBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// followBuckets span 100 ms to 10 min: a follow ends one or two runtime polls after the
	// containers exit, or at the pod's grace period plus a margin when they never do.
	followBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// readyBuckets span 10 ms to 60 s: a volume is usually ready within 100-400 ms of its
	// publish; a native sidecar starts after every volume is published, so the kubelet's
	// own pace is in the tail.
	readyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}
	// callBuckets span 1 ms to 10 s.
	callBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}
)

// The lifecycle (pkg/podwatch).
var (
	PodsDone = Family{Name: "gcsfuse_csi_pods_done_total", Kind: Counter, Labels: []string{"rule"},
		Help: "Pods whose workload was found done, so their sidecar was told to exit, by deciding rule."}
	SidecarFailures = Family{Name: "gcsfuse_csi_sidecar_failures_total", Kind: Counter,
		Help: "Pods whose gcsfuse sidecar exited with a non-zero code."}
	ExitLatency = Family{Name: "gcsfuse_csi_workload_done_to_sidecar_exit_seconds", Kind: Histogram, Labels: []string{"mode"}, Buckets: exitBuckets,
		Help: "Time from the last workload container's exit to the sidecar's exit, by sidecar mode."}
	RuntimeFollows = Family{Name: "gcsfuse_csi_runtime_follows_total", Kind: Counter, Labels: []string{"why", "result"},
		Help: "Pods followed in the container runtime until the containers that use their mounts exited, by trigger and result (released, deadline, stopped)."}
	RuntimeFollow = Family{Name: "gcsfuse_csi_runtime_follow_seconds", Kind: Histogram, Labels: []string{"result"}, Buckets: followBuckets,
		Help: "Time a pod was followed in the container runtime, by result."}
	// WatchSynced is 0 while pods that finish are only acted on once the API answers again
	// (CSI calls are not affected).
	WatchSynced = Family{Name: "gcsfuse_csi_pod_watch_synced", Kind: Gauge,
		Help: "1 while the pod watch is in step with the API server (cache synced, latest list or watch request succeeded), else 0."}
	WatchErrors = Family{Name: "gcsfuse_csi_pod_watch_errors_total", Kind: Counter, Labels: []string{"op"},
		Help: "Failed list and watch requests of the pod watch, by op (list, watch); the watch retries them with backoff."}
	PodsTracked = Family{Name: "gcsfuse_csi_pods_tracked", Kind: Gauge,
		Help: "Pods of this node that use the driver, in the pod watch's cache."}
)

// The container runtime watch (pkg/runtimewatch).
var (
	RuntimeSource = Family{Name: "gcsfuse_csi_runtime_watch_source", Kind: Gauge, Labels: []string{"source"},
		Help: "Where the node plugin learns container exits: 1 for the source in use (events: the CRI event stream; poll: a node-wide ListContainers every 100 ms), 0 for the other. Both 0: no runtime endpoint, the API server alone."}
	RuntimeEvents = Family{Name: "gcsfuse_csi_runtime_watch_events_total", Kind: Counter, Labels: []string{"kind"},
		Help: "Container events received from the runtime's event stream, by kind."}
	RuntimeRelists = Family{Name: "gcsfuse_csi_runtime_watch_relists_total", Kind: Counter,
		Help: "Node-wide container listings (every poll, or the resync behind the event stream)."}
	RuntimeErrors = Family{Name: "gcsfuse_csi_runtime_watch_errors_total", Kind: Counter, Labels: []string{"op"},
		Help: "Failed container listings (op=list) and ended event streams (op=events); both are retried."}
)

// The Node service (pkg/csidriver).
var (
	// VolumeReady is what a pod's start waits for, per volume.
	VolumeReady = Family{Name: "gcsfuse_csi_volume_ready_seconds", Kind: Histogram, Buckets: readyBuckets,
		Help: "Time from NodePublishVolume to the sidecar's report that gcsfuse serves the volume."}
	VolumeFailures = Family{Name: "gcsfuse_csi_volume_failures_total", Kind: Counter, Labels: []string{"reason"},
		Help: "Volumes that failed, by reason: start (gcsfuse never served), exited (gcsfuse died while serving), refused (the sidecar refused the hand-off)."}
	CallSeconds = Family{Name: "gcsfuse_csi_node_call_seconds", Kind: Histogram, Labels: []string{"method", "code"}, Buckets: callBuckets,
		Help: "Duration of NodePublishVolume and NodeUnpublishVolume, by method and gRPC code."}
	VolumesPublished = Family{Name: "gcsfuse_csi_volumes_published", Kind: Gauge,
		Help: "Volumes published by this node plugin and not unpublished since it started."}
	// SharedMountPods: the mounter's gcsfuse series carry the key as their volume label, so
	// a join on it gives each pod's share.
	SharedMountPods = Family{Name: "gcsfuse_csi_shared_mount_pods", Kind: Gauge, Labels: []string{"key", "namespace", "pod", "volume"},
		Help: "1 for each pod volume bound to a shared mount (mountMode: shared), by sharing key; the mounter's gcsfuse series carry the key as volume."}
)

// The collection of every pod's gcsfuse series (pkg/podmetrics).
var (
	PodMetricsErrors = Family{Name: "gcsfuse_csi_pod_metrics_errors_total", Kind: Counter, Labels: []string{"reason"},
		Help: "Pods whose sidecar metrics socket could not be read at a scrape, by reason (dial, read, parse)."}
	PodMetricsSeconds = Family{Name: "gcsfuse_csi_pod_metrics_collect_seconds", Kind: Gauge,
		Help: "Time the last collection of every pod's gcsfuse metrics took."}
	PodMetricsSlow = Family{Name: "gcsfuse_csi_pod_metrics_slow_pods", Kind: Gauge,
		Help: "Pods the last collection left out because their sidecar's metrics socket did not answer within the scrape budget, or the budget was spent before their turn."}
)

// All are the families above, in the order the reference lists them, with their exporter.
var All = exportedBy(NodePlugin,
	PodsDone, SidecarFailures, ExitLatency, RuntimeFollows, RuntimeFollow, WatchSynced, WatchErrors, PodsTracked,
	RuntimeSource, RuntimeEvents, RuntimeRelists, RuntimeErrors,
	VolumeReady, VolumeFailures, CallSeconds, VolumesPublished, SharedMountPods,
	PodMetricsErrors, PodMetricsSeconds, PodMetricsSlow,
)

// ControllerFamilies are the provisioning library's families as the controller serves them
// (its subsystem "controller"), with the library's help: recorded by the library's
// provision controller, not by code here.
var ControllerFamilies = exportedBy(Controller,
	Family{Name: "controller_persistentvolumeclaim_provision_total", Kind: Counter, Labels: []string{"class", "source"},
		Help: "Total number of persistent volumes provisioned succesfully. Broken down by storage class name and source of the claim."},
	Family{Name: "controller_persistentvolumeclaim_provision_failed_total", Kind: Counter, Labels: []string{"class", "source"},
		Help: "Total number of persistent volume provision failed attempts. Broken down by storage class name and source of the claim."},
	Family{Name: "controller_persistentvolumeclaim_provision_duration_seconds", Kind: Histogram, Labels: []string{"class", "source"}, Buckets: prometheus.DefBuckets,
		Help: "Latency in seconds to provision persistent volumes. Failed provisioning attempts are ignored. Broken down by storage class name and source of the claim."},
	Family{Name: "controller_persistentvolume_delete_total", Kind: Counter, Labels: []string{"class"},
		Help: "Total number of persistent volumes deleted succesfully. Broken down by storage class name."},
	Family{Name: "controller_persistentvolume_delete_failed_total", Kind: Counter, Labels: []string{"class"},
		Help: "Total number of persistent volume delete failed attempts. Broken down by storage class name."},
	Family{Name: "controller_persistentvolume_delete_duration_seconds", Kind: Histogram, Labels: []string{"class"}, Buckets: prometheus.DefBuckets,
		Help: "Latency in seconds to delete persistent volumes. Failed deletion attempts are ignored. Broken down by storage class name."},
)

func exportedBy(exporter string, fs ...Family) []Family {
	for i := range fs {
		fs[i].Exporter = exporter
	}
	return fs
}

// must panics when the family is used as another kind or with another number of labels
// than declared: a programming error, which the first unit test that builds the collector
// finds.
func (f Family) must(k Kind, vec bool) {
	if f.Kind != k || (len(f.Labels) > 0) != vec {
		panic(fmt.Sprintf("metricscatalog: %s is a %s with labels %v, used as a %s (labels: %v)", f.Name, f.Kind, f.Labels, k, vec))
	}
}

// NewCounter builds the family's collector.
func (f Family) NewCounter() prometheus.Counter {
	f.must(Counter, false)
	return prometheus.NewCounter(prometheus.CounterOpts{Name: f.Name, Help: f.Help})
}

// NewCounterVec builds the family's collector.
func (f Family) NewCounterVec() *prometheus.CounterVec {
	f.must(Counter, true)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: f.Name, Help: f.Help}, slices.Clone(f.Labels))
}

// NewGauge builds the family's collector.
func (f Family) NewGauge() prometheus.Gauge {
	f.must(Gauge, false)
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: f.Name, Help: f.Help})
}

// NewGaugeVec builds the family's collector.
func (f Family) NewGaugeVec() *prometheus.GaugeVec {
	f.must(Gauge, true)
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: f.Name, Help: f.Help}, slices.Clone(f.Labels))
}

// NewGaugeFunc builds the family's collector, read from value at each scrape.
func (f Family) NewGaugeFunc(value func() float64) prometheus.GaugeFunc {
	f.must(Gauge, false)
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: f.Name, Help: f.Help}, value)
}

// NewHistogram builds the family's collector.
func (f Family) NewHistogram() prometheus.Histogram {
	f.must(Histogram, false)
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: f.Name, Help: f.Help, Buckets: slices.Clone(f.Buckets)})
}

// NewHistogramVec builds the family's collector.
func (f Family) NewHistogramVec() *prometheus.HistogramVec {
	f.must(Histogram, true)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: f.Name, Help: f.Help, Buckets: slices.Clone(f.Buckets)}, slices.Clone(f.Labels))
}

// NewDesc is the family's description, for a collector of its own that makes the series
// at each scrape (a gauge with labels).
func (f Family) NewDesc() *prometheus.Desc {
	f.must(Gauge, true)
	return prometheus.NewDesc(f.Name, f.Help, slices.Clone(f.Labels), nil)
}
