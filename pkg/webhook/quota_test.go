package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// chartDefaults are the webhook's default sidecar resources (cmd/gcsfuse-webhook).
var chartDefaults = ResourceDefaults{
	Requests: rl("cpu", "100m", "memory", "128Mi", "ephemeral-storage", "5Gi"),
	Limits:   rl("memory", "1Gi"),
}

// rl builds a ResourceList from name, quantity pairs.
func rl(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func quota(name string, hard corev1.ResourceList) corev1.ResourceQuota {
	return corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
}

// quotaWithStatus is a quota as the quota controller leaves it: hard and used in status.
func quotaWithStatus(name string, hard, used corev1.ResourceList) corev1.ResourceQuota {
	q := quota(name, hard)
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
	return q
}

func limitRange(name string, item corev1.LimitRangeItem) corev1.LimitRange {
	item.Type = corev1.LimitTypeContainer
	return corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{item}}}
}

func TestFitSidecarResources(t *testing.T) {
	allQuota := quota("q1", rl("limits.cpu", "4", "limits.memory", "8Gi", "requests.cpu", "2", "requests.memory", "4Gi"))
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		defaults    *ResourceDefaults // nil: chartDefaults
		pol         ResourcePolicy
		wantReq     corev1.ResourceList
		wantLim     corev1.ResourceList
		wantDeny    []string
	}{
		{name: "no policy: the defaults",
			wantReq: chartDefaults.Requests, wantLim: chartDefaults.Limits},
		{name: "quota on cpu and memory: the cpu limit is the request",
			pol:     ResourcePolicy{Quotas: []corev1.ResourceQuota{allQuota}},
			wantReq: chartDefaults.Requests, wantLim: rl("cpu", "100m", "memory", "1Gi")},
		{name: "quota on ephemeral-storage limits",
			pol:     ResourcePolicy{Quotas: []corev1.ResourceQuota{quota("q", rl("limits.ephemeral-storage", "100Gi"))}},
			wantReq: chartDefaults.Requests, wantLim: rl("memory", "1Gi", "ephemeral-storage", "5Gi")},
		{name: "quota on plain cpu, no default request: the fallback",
			defaults: &ResourceDefaults{Requests: rl("memory", "128Mi")},
			pol:      ResourcePolicy{Quotas: []corev1.ResourceQuota{quota("q", rl("cpu", "2"))}},
			wantReq:  rl("cpu", "100m", "memory", "128Mi")},
		{name: "quota on requests.memory, only a default limit: the limit",
			defaults: &ResourceDefaults{Limits: rl("memory", "512Mi")},
			pol:      ResourcePolicy{Quotas: []corev1.ResourceQuota{quota("q", rl("requests.memory", "2Gi"))}},
			wantReq:  rl("memory", "512Mi"), wantLim: rl("memory", "512Mi")},
		{name: "LimitRange defaults fill what a quota needs",
			pol: ResourcePolicy{Quotas: []corev1.ResourceQuota{quota("q", rl("limits.cpu", "4", "requests.ephemeral-storage", "1Ti"))},
				LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{Default: rl("cpu", "300m"), DefaultRequest: rl("cpu", "50m")})}},
			wantReq: chartDefaults.Requests, wantLim: rl("cpu", "300m", "memory", "1Gi")},
		{name: "LimitRange max cpu: a limit at the max, memory clamped",
			pol:     ResourcePolicy{LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{Max: rl("cpu", "500m", "memory", "512Mi")})}},
			wantReq: chartDefaults.Requests, wantLim: rl("cpu", "500m", "memory", "512Mi")},
		{name: "LimitRange min raises the request",
			pol:     ResourcePolicy{LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{Min: rl("cpu", "250m")})}},
			wantReq: rl("cpu", "250m", "memory", "128Mi", "ephemeral-storage", "5Gi"), wantLim: chartDefaults.Limits},
		{name: "LimitRange max below the default request lowers both",
			pol:     ResourcePolicy{LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{Max: rl("memory", "64Mi")})}},
			wantReq: rl("cpu", "100m", "memory", "64Mi", "ephemeral-storage", "5Gi"), wantLim: rl("memory", "64Mi")},
		{name: "maxLimitRequestRatio raises the request",
			pol:     ResourcePolicy{LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{MaxLimitRequestRatio: rl("memory", "2")})}},
			wantReq: rl("cpu", "100m", "memory", "512Mi", "ephemeral-storage", "5Gi"), wantLim: rl("memory", "1Gi")},
		{name: "the tightest of several LimitRanges",
			pol: ResourcePolicy{LimitRanges: []corev1.LimitRange{
				limitRange("a", corev1.LimitRangeItem{Max: rl("cpu", "2")}),
				limitRange("b", corev1.LimitRangeItem{Max: rl("cpu", "400m")}),
			}},
			wantReq: chartDefaults.Requests, wantLim: rl("cpu", "400m", "memory", "1Gi")},
		{name: "the highest minimum of several LimitRanges (LimitRanger enforces each)",
			pol: ResourcePolicy{LimitRanges: []corev1.LimitRange{
				limitRange("a", corev1.LimitRangeItem{Min: rl("cpu", "150m")}),
				limitRange("b", corev1.LimitRangeItem{Min: rl("cpu", "250m")}),
				limitRange("c", corev1.LimitRangeItem{Min: rl("cpu", "200m")}),
			}},
			wantReq: rl("cpu", "250m", "memory", "128Mi", "ephemeral-storage", "5Gi"), wantLim: chartDefaults.Limits},
		{name: "annotations within the bounds win",
			annotations: map[string]string{contract.AnnotationCPULimit: "300m"},
			pol: ResourcePolicy{Quotas: []corev1.ResourceQuota{allQuota},
				LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{Max: rl("cpu", "500m"), Default: rl("cpu", "200m")})}},
			wantReq: rl("cpu", "300m", "memory", "128Mi", "ephemeral-storage", "5Gi"), wantLim: rl("cpu", "300m", "memory", "1Gi")},
		{name: "annotated limit above the LimitRange max",
			annotations: map[string]string{contract.AnnotationCPULimit: "1"},
			pol:         ResourcePolicy{LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{Max: rl("cpu", "500m")})}},
			wantDeny:    []string{contract.AnnotationCPULimit, `"1"`, "above the maximum 500m of LimitRange lr"}},
		{name: "annotated request below the LimitRange min",
			annotations: map[string]string{contract.AnnotationMemoryRequest: "64Mi", contract.AnnotationMemoryLimit: "1Gi"},
			pol:         ResourcePolicy{LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{Min: rl("memory", "100Mi")})}},
			wantDeny:    []string{contract.AnnotationMemoryRequest, "below the minimum 100Mi of LimitRange lr"}},
		{name: "annotated unlimited where a quota needs a limit",
			annotations: map[string]string{contract.AnnotationCPULimit: "0", contract.AnnotationCPURequest: "100m"},
			pol:         ResourcePolicy{Quotas: []corev1.ResourceQuota{allQuota}},
			wantDeny:    []string{contract.AnnotationCPULimit, "asks for no cpu limit", "ResourceQuota q1 (limits.cpu)"}},
		{name: "annotated ratio above the LimitRange's",
			annotations: map[string]string{contract.AnnotationMemoryRequest: "100Mi", contract.AnnotationMemoryLimit: "1Gi"},
			pol:         ResourcePolicy{LimitRanges: []corev1.LimitRange{limitRange("lr", corev1.LimitRangeItem{MaxLimitRequestRatio: rl("memory", "2")})}},
			wantDeny:    []string{contract.AnnotationMemoryRequest, "more than 2 times the request", "LimitRange lr"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defaults := chartDefaults
			if tt.defaults != nil {
				defaults = *tt.defaults
			}
			res, err := sidecarResources(tt.annotations, defaults)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fitSidecarResources(res, tt.annotations, defaults, tt.pol)
			if tt.wantDeny != nil {
				var bad *badRequestError
				if !errors.As(err, &bad) {
					t.Fatalf("err = %v, want a denial", err)
				}
				for _, s := range tt.wantDeny {
					if !strings.Contains(bad.msg, s) {
						t.Errorf("denial %q does not mention %q", bad.msg, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equalResources(got.Requests, tt.wantReq) || !equalResources(got.Limits, tt.wantLim) {
				t.Errorf("requests %v limits %v; want %v %v", got.Requests, got.Limits, tt.wantReq, tt.wantLim)
			}
		})
	}
}

func TestPodTotals(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	ctr := func(cpu string, native bool) corev1.Container {
		c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: rl("cpu", cpu)}}
		if native {
			c.RestartPolicy = &always
		}
		return c
	}
	for _, tt := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"regular containers add up", corev1.PodSpec{Containers: []corev1.Container{ctr("100m", false), ctr("200m", false)}}, "300m"},
		{"a big init container", corev1.PodSpec{InitContainers: []corev1.Container{ctr("1", false)}, Containers: []corev1.Container{ctr("100m", false)}}, "1"},
		{"native sidecars run with the init containers after them and the containers",
			corev1.PodSpec{InitContainers: []corev1.Container{ctr("100m", true), ctr("1", false)}, Containers: []corev1.Container{ctr("100m", false)}}, "1100m"},
		{"a native sidecar after the init container",
			corev1.PodSpec{InitContainers: []corev1.Container{ctr("1", false), ctr("100m", true)}, Containers: []corev1.Container{ctr("100m", false)}}, "1"},
		{"overhead", corev1.PodSpec{Containers: []corev1.Container{ctr("100m", false)}, Overhead: rl("cpu", "50m")}, "150m"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := podTotals(tt.spec, false)[corev1.ResourceCPU]
			if got.Cmp(resource.MustParse(tt.want)) != 0 {
				t.Errorf("cpu = %s, want %s", got.String(), tt.want)
			}
		})
	}
}

func TestCheckQuotaRoom(t *testing.T) {
	app := corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "50m"), Limits: rl("cpu", "50m")}}
	sidecar := corev1.Container{Name: contract.SidecarContainerName, Resources: corev1.ResourceRequirements{Requests: rl("cpu", "100m"), Limits: rl("cpu", "100m")}}
	without := corev1.PodSpec{Containers: []corev1.Container{app}}
	with := corev1.PodSpec{Containers: []corev1.Container{sidecar, app}}
	scoped := quotaWithStatus("scoped", rl("limits.cpu", "2"), rl("limits.cpu", "1950m"))
	scoped.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotTerminating}
	for _, tt := range []struct {
		name     string
		quotas   []corev1.ResourceQuota
		wantDeny []string
	}{
		{name: "room for both", quotas: []corev1.ResourceQuota{quotaWithStatus("q1", rl("limits.cpu", "2"), rl("limits.cpu", "1"))}},
		{name: "room for the pod alone", quotas: []corev1.ResourceQuota{quotaWithStatus("q1", rl("limits.cpu", "2"), rl("limits.cpu", "1950m"))},
			wantDeny: []string{"the gcsfuse sidecar adds limits.cpu 100m; quota q1 has 50m left", contract.AnnotationCPULimit}},
		{name: "requests counted under the plain name", quotas: []corev1.ResourceQuota{quotaWithStatus("q2", rl("cpu", "1"), rl("cpu", "900m"))},
			wantDeny: []string{"adds cpu 100m; quota q2 has 100m left", contract.AnnotationCPURequest}},
		{name: "not even the pod alone fits: the API server says so", quotas: []corev1.ResourceQuota{quotaWithStatus("q1", rl("limits.cpu", "2"), rl("limits.cpu", "1990m"))}},
		{name: "a quota without status yet", quotas: []corev1.ResourceQuota{quota("q1", rl("limits.cpu", "1m"))}},
		{name: "a scoped quota is the API server's", quotas: []corev1.ResourceQuota{scoped}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkQuotaRoom(tt.quotas, without, with)
			if tt.wantDeny == nil {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("admitted, want a denial")
			}
			for _, s := range tt.wantDeny {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("denial %q does not mention %q", err, s)
				}
			}
		})
	}
}

// fakePolicy is a NamespacePolicy with a fixed answer.
type fakePolicy struct {
	pol ResourcePolicy
	err error
}

func (f fakePolicy) ResourcePolicy(context.Context, string) (ResourcePolicy, error) {
	return f.pol, f.err
}

func policyMutator(t *testing.T, p NamespacePolicy) *Mutator {
	t.Helper()
	cfg := testConfig()
	cfg.Resources = chartDefaults
	cfg.Policy = p
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Through the admission: a namespace whose quota asks for cpu and memory limits gets a pod
// whose sidecar has them; a pod that fits only without the sidecar is refused naming the
// quota; a policy that cannot be read is a warning and the plain defaults.
func TestInjectionUnderQuota(t *testing.T) {
	withLimits := func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi"), Limits: rl("cpu", "100m", "memory", "64Mi")}
	}
	hard := rl("limits.cpu", "2", "limits.memory", "4Gi", "requests.cpu", "1", "requests.memory", "2Gi")
	_, out := mustAdmit(t, policyMutator(t, fakePolicy{pol: ResourcePolicy{Quotas: []corev1.ResourceQuota{quotaWithStatus("q1", hard, nil)}}}), newPod(withLimits))
	c, _ := sidecarOf(t, out)
	if !equalResources(c.Resources.Limits, rl("cpu", "100m", "memory", "1Gi")) {
		t.Errorf("sidecar limits = %v, want cpu 100m memory 1Gi", c.Resources.Limits)
	}

	full := quotaWithStatus("q1", hard, rl("limits.cpu", "1850m"))
	resp, _ := admit(t, policyMutator(t, fakePolicy{pol: ResourcePolicy{Quotas: []corev1.ResourceQuota{full}}}), newPod(withLimits))
	assertDenied(t, resp, "the gcsfuse sidecar adds limits.cpu 100m; quota q1 has 150m left")

	resp, out = mustAdmit(t, policyMutator(t, fakePolicy{err: errors.New("connection refused")}), newPod(withLimits))
	if !containsSubstring(resp.Warnings, "connection refused") {
		t.Errorf("warnings = %q, want the lookup failure", resp.Warnings)
	}
	if c, _ := sidecarOf(t, out); !equalResources(c.Resources.Limits, chartDefaults.Limits) {
		t.Errorf("sidecar limits = %v, want the defaults", c.Resources.Limits)
	}
}

// The cached policy answers from its informers: nothing before they have synced (the
// webhook is not ready then), the namespace's own objects after, and later changes once the
// watch delivers them.
func TestCachedNamespacePolicy(t *testing.T) {
	q := quota("q1", rl("limits.cpu", "1"))
	q.Namespace = "ns"
	lr := limitRange("lr", corev1.LimitRangeItem{Max: rl("cpu", "500m")})
	lr.Namespace = "ns"
	other := quota("elsewhere", rl("limits.cpu", "1"))
	other.Namespace = "other"
	client := fake.NewClientset(&q, &lr, &other)
	c := NewCachedNamespacePolicy(client)
	if _, err := c.ResourcePolicy(context.Background(), "ns"); err == nil || c.Ready() {
		t.Fatal("an answer before the caches synced")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, c.Ready)
	p, err := c.ResourcePolicy(context.Background(), "ns")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Quotas) != 1 || p.Quotas[0].Name != "q1" || len(p.LimitRanges) != 1 || p.LimitRanges[0].Name != "lr" {
		t.Errorf("policy = %+v, want q1 and lr", p)
	}
	q2 := quota("q2", rl("limits.memory", "1Gi"))
	q2.Namespace = "ns"
	if _, err := client.CoreV1().ResourceQuotas("ns").Create(context.Background(), &q2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { p, _ := c.ResourcePolicy(context.Background(), "ns"); return len(p.Quotas) == 2 })
}
