package webhook

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestModeFromClusterVersions(t *testing.T) {
	kubelets := map[string]map[string]string{
		"kubelets 1.28":  {"a": "v1.28.7", "b": "v1.28.9"},
		"kubelets 1.29":  {"a": "v1.29.0", "b": "v1.29.3-gke.1093000"},
		"kubelets mixed": {"old": "v1.28.7", "new": "v1.30.2"},
	}
	wantNative := map[string]bool{
		"apiserver 1.28/kubelets 1.28": false, "apiserver 1.28/kubelets 1.29": false, "apiserver 1.28/kubelets mixed": false,
		"apiserver 1.29/kubelets 1.28": false, "apiserver 1.29/kubelets 1.29": true, "apiserver 1.29/kubelets mixed": false,
		"apiserver 1.30/kubelets 1.28": false, "apiserver 1.30/kubelets 1.29": true, "apiserver 1.30/kubelets mixed": false,
	}
	servers := map[string]string{"apiserver 1.28": "v1.28.15", "apiserver 1.29": "v1.29.0-rc.1", "apiserver 1.30": "v1.30.4-eks-a737599"}
	for sname, server := range servers {
		for kname, nodes := range kubelets {
			name := sname + "/" + kname
			t.Run(name, func(t *testing.T) {
				m := newMutator(t, fakeVersions{server: server, nodes: nodes})
				_, pod := mustAdmit(t, m, newPod())
				assertMode(t, pod, wantNative[name])
			})
		}
	}
}

func TestModePinnedNode(t *testing.T) {
	mixed := fakeVersions{server: "v1.30.0", nodes: map[string]string{"old": "v1.28.7", "new": "v1.30.2"}}
	tests := []struct {
		node       string
		versions   fakeVersions
		wantNative bool
	}{
		{"new", mixed, true},
		{"old", mixed, false},
		{"unknown", mixed, false}, // not in the cache: the whole cluster's minimum counts
		{"new", fakeVersions{server: "v1.28.0", nodes: mixed.nodes}, false},
	}
	for _, tt := range tests {
		t.Run(tt.node+"@"+tt.versions.server, func(t *testing.T) {
			m := newMutator(t, tt.versions)
			_, pod := mustAdmit(t, m, newPod(func(p *corev1.Pod) { p.Spec.NodeName = tt.node }))
			assertMode(t, pod, tt.wantNative)
		})
	}
}

func TestModeFallsBackToLegacyWhenVersionsUnknown(t *testing.T) {
	tests := map[string]fakeVersions{
		"server error": {serverErr: errors.New("discovery down")},
		"node error":   {server: "v1.30.0", nodeErr: errors.New("cache not synced")},
		"no nodes":     {server: "v1.30.0"},
	}
	for name, cv := range tests {
		t.Run(name, func(t *testing.T) {
			resp, pod := mustAdmit(t, newMutator(t, cv), newPod())
			assertMode(t, pod, false)
			if !containsSubstring(resp.Warnings, "could not be checked") {
				t.Errorf("warnings = %q, want one saying the versions could not be checked", resp.Warnings)
			}
		})
	}
}

func TestForcedMode(t *testing.T) {
	tests := []struct {
		name        string
		cluster     fakeVersions
		mode        string
		wantNative  bool
		wantWarning bool
	}{
		{"legacy on a modern cluster", modern, contract.ModeLegacy, false, false},
		{"native on a modern cluster", modern, contract.ModeNative, true, false},
		{"native on an old cluster", old, contract.ModeNative, true, true},
		{"native when versions are unknown", fakeVersions{serverErr: errors.New("x")}, contract.ModeNative, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, pod := mustAdmit(t, newMutator(t, tt.cluster), newPod(annotate(contract.AnnotationSidecarMode, tt.mode)))
			assertMode(t, pod, tt.wantNative)
			if got := containsSubstring(resp.Warnings, "forced"); got != tt.wantWarning {
				t.Errorf("warnings = %q, want a 'forced' warning: %v", resp.Warnings, tt.wantWarning)
			}
		})
	}
}

// assertMode checks where the sidecar went and that everything that depends on the mode
// (restart policy, env, annotation) agrees.
func assertMode(t *testing.T, pod *corev1.Pod, wantNative bool) {
	t.Helper()
	c, isInit := sidecarOf(t, pod)
	mode := contract.ModeLegacy
	if wantNative {
		mode = contract.ModeNative
	}
	if isInit != wantNative {
		t.Fatalf("sidecar is an init container: %v, want %v", isInit, wantNative)
	}
	if wantNative {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("native sidecar restartPolicy = %v, want Always", c.RestartPolicy)
		}
	} else if c.RestartPolicy != nil {
		t.Errorf("legacy sidecar has restartPolicy %v", *c.RestartPolicy)
	}
	if got := envOf(c)[contract.EnvSidecarMode]; got != mode {
		t.Errorf("%s = %q, want %q", contract.EnvSidecarMode, got, mode)
	}
	if got := pod.Annotations[contract.AnnotationInjected]; got != mode {
		t.Errorf("annotation %s = %q, want %q", contract.AnnotationInjected, got, mode)
	}
}

func containsSubstring(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func TestPlacement(t *testing.T) {
	sc := contract.SidecarContainerName
	always := corev1.ContainerRestartPolicyAlways
	ctr := func(name string, mountsData bool) corev1.Container {
		c := corev1.Container{Name: name, Image: "busybox"}
		if mountsData {
			c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}
		return c
	}
	istio := corev1.Container{Name: "istio-proxy", Image: "istio/proxyv2", RestartPolicy: &always}
	tests := []struct {
		name        string
		cluster     fakeVersions
		init        []corev1.Container
		containers  []corev1.Container
		wantInit    []string
		wantCtrs    []string
		wantWarning string
	}{
		{
			name: "legacy first", cluster: old,
			containers: []corev1.Container{ctr("app", true), ctr("other", false)},
			wantCtrs:   []string{sc, "app", "other"},
		},
		{
			name: "legacy after istio-proxy", cluster: old,
			containers: []corev1.Container{ctr("istio-proxy", false), ctr("app", true)},
			wantCtrs:   []string{"istio-proxy", sc, "app"},
		},
		{
			name: "legacy after a late istio-proxy", cluster: old,
			containers: []corev1.Container{ctr("app", true), ctr("istio-proxy", false)},
			wantCtrs:   []string{"app", "istio-proxy", sc},
		},
		{
			name: "legacy after init containers that do not read the bucket", cluster: old,
			init:       []corev1.Container{ctr("setup", false)},
			containers: []corev1.Container{ctr("app", true)},
			wantInit:   []string{"setup"},
			wantCtrs:   []string{sc, "app"},
		},
		{
			name: "native without init containers", cluster: modern,
			containers: []corev1.Container{ctr("app", true)},
			wantInit:   []string{sc},
			wantCtrs:   []string{"app"},
		},
		{
			name: "native before every init container", cluster: modern,
			init:       []corev1.Container{ctr("setup", false), ctr("warmup", true)},
			containers: []corev1.Container{ctr("app", true)},
			wantInit:   []string{sc, "setup", "warmup"},
			wantCtrs:   []string{"app"},
		},
		{
			name: "native after a native istio-proxy", cluster: modern,
			init:       []corev1.Container{istio, ctr("warmup", true)},
			containers: []corev1.Container{ctr("app", true)},
			wantInit:   []string{"istio-proxy", sc, "warmup"},
			wantCtrs:   []string{"app"},
		},
		{
			name: "native before a reader even when istio-proxy is later", cluster: modern,
			init:       []corev1.Container{ctr("setup", false), ctr("warmup", true), istio},
			containers: []corev1.Container{ctr("app", true)},
			wantInit:   []string{sc, "setup", "warmup", "istio-proxy"},
			wantCtrs:   []string{"app"},
		},
		{
			name: "native after istio-proxy and before the first reader", cluster: modern,
			init:       []corev1.Container{ctr("setup", false), istio, ctr("warmup", true)},
			containers: []corev1.Container{ctr("app", true)},
			wantInit:   []string{"setup", "istio-proxy", sc, "warmup"},
			wantCtrs:   []string{"app"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := newPod(func(p *corev1.Pod) {
				p.Spec.InitContainers = tt.init
				p.Spec.Containers = tt.containers
			})
			resp, out := mustAdmit(t, newMutator(t, tt.cluster), pod)
			if got := names(out.Spec.InitContainers); !reflect.DeepEqual(got, tt.wantInit) {
				t.Errorf("init containers = %v, want %v", got, tt.wantInit)
			}
			if got := names(out.Spec.Containers); !reflect.DeepEqual(got, tt.wantCtrs) {
				t.Errorf("containers = %v, want %v", got, tt.wantCtrs)
			}
			if tt.wantWarning != "" && !containsSubstring(resp.Warnings, tt.wantWarning) {
				t.Errorf("warnings = %q, want one containing %q", resp.Warnings, tt.wantWarning)
			}
			// The user's containers are untouched (the patch inserts, it does not rewrite).
			for _, c := range append(append([]corev1.Container{}, out.Spec.InitContainers...), out.Spec.Containers...) {
				if c.Name != sc && c.Image == "" {
					t.Errorf("container %s lost its image", c.Name)
				}
			}
		})
	}
}

func TestSidecarSpec(t *testing.T) {
	grace := int64(120)
	tests := []struct {
		name      string
		pod       *corev1.Pod
		wantGrace string
	}{
		{"default grace period", newPod(), "30"},
		{"pod grace period", newPod(func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = &grace }), "120"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, out := mustAdmit(t, newMutator(t, modern), tt.pod)
			c, _ := sidecarOf(t, out)
			if c.Image != defaultImage {
				t.Errorf("image = %q, want %q", c.Image, defaultImage)
			}
			if got := envOf(c)[contract.EnvGraceSeconds]; got != tt.wantGrace {
				t.Errorf("%s = %q, want %q", contract.EnvGraceSeconds, got, tt.wantGrace)
			}
			if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
				t.Errorf("terminationMessagePolicy = %q", c.TerminationMessagePolicy)
			}
			assertRestricted(t, c.SecurityContext)
		})
	}
}

// A legacy sidecar waits in a preStop hook for the exit file, so that the kubelet does not
// SIGTERM it while an app's own preStop hook may still write; a native sidecar, stopped
// only after the regular containers, has no hook. A legacy copy re-invoked keeps its hook.
func TestLegacyPreStop(t *testing.T) {
	want := &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
		Exec: &corev1.ExecAction{Command: []string{contract.SidecarBinary, contract.PreStopWaitFlag}}}}
	for _, tt := range []struct {
		name    string
		cluster fakeVersions
		mods    []func(*corev1.Pod)
		legacy  bool
	}{
		{name: "native", cluster: modern},
		{name: "legacy by versions", cluster: old, legacy: true},
		{name: "forced legacy", cluster: modern, mods: []func(*corev1.Pod){annotate(contract.AnnotationSidecarMode, contract.ModeLegacy)}, legacy: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, out := mustAdmit(t, newMutator(t, tt.cluster), newPod(tt.mods...))
			c, isInit := sidecarOf(t, out)
			if isInit == tt.legacy {
				t.Fatalf("sidecar is an init container: %v, want %v", isInit, !tt.legacy)
			}
			if !tt.legacy {
				if c.Lifecycle != nil {
					t.Errorf("native sidecar lifecycle = %+v, want none", c.Lifecycle)
				}
				return
			}
			if !reflect.DeepEqual(c.Lifecycle, want) {
				t.Errorf("legacy sidecar lifecycle = %+v, want preStop exec %v", c.Lifecycle, want.PreStop.Exec.Command)
			}
			if resp, _ := mustAdmit(t, newMutator(t, tt.cluster), out); resp.Patch != nil {
				t.Errorf("re-invocation patched: %s", resp.Patch)
			}
		})
	}
}

// assertRestricted checks the "restricted" Pod Security Standard's container rules.
func assertRestricted(t *testing.T, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil {
		t.Fatal("no security context")
	}
	switch {
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot is not true")
	case sc.RunAsUser == nil || *sc.RunAsUser != contract.SidecarUID:
		t.Errorf("runAsUser = %v", sc.RunAsUser)
	case sc.RunAsGroup == nil || *sc.RunAsGroup != contract.SidecarGID:
		t.Errorf("runAsGroup = %v", sc.RunAsGroup)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not true")
	case sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities = %+v, want drop ALL", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccompProfile = %+v", sc.SeccompProfile)
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("privileged")
	}
}

func TestVolumes(t *testing.T) {
	pvc := corev1.Volume{Name: contract.BufferVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "fast-buffer"}}}
	ramCache := corev1.Volume{Name: contract.CacheVolumeName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}
	gkeBuffer := corev1.Volume{Name: incumbentBufferVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "gke-buffer"}}}
	gkeCache := corev1.Volume{Name: incumbentCacheVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}
	otherDriver := corev1.Volume{Name: "other", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: "other.csi.example.com", VolumeAttributes: map[string]string{contract.AttrMountOptions: "file-cache:max-size-mb:10"}}}}
	tests := []struct {
		name      string
		volumes   []corev1.Volume
		wantCache bool
		// wantKept are user volumes that must come out unchanged.
		wantKept []corev1.Volume
		// bufferName and cacheName are the volumes the sidecar mounts (default: ours).
		bufferName, cacheName string
	}{
		{name: "no cache asked", volumes: []corev1.Volume{gcsVolume("data", nil)}},
		{name: "fileCacheCapacity", volumes: []corev1.Volume{gcsVolume("data", map[string]string{contract.AttrFileCacheCapacity: "10Gi"})}, wantCache: true},
		{name: "mount option file-cache:", volumes: []corev1.Volume{gcsVolume("data", map[string]string{contract.AttrMountOptions: "implicit-dirs,file-cache:max-size-mb:1024"})}, wantCache: true},
		{name: "mount option file-cache-max-size-mb", volumes: []corev1.Volume{gcsVolume("data", map[string]string{contract.AttrMountOptions: "file-cache-max-size-mb=1024"})}, wantCache: true},
		{name: "other mount options", volumes: []corev1.Volume{gcsVolume("data", map[string]string{contract.AttrMountOptions: "implicit-dirs,uid=1000"})}},
		{name: "cache option on another driver", volumes: []corev1.Volume{gcsVolume("data", nil), otherDriver}},
		{name: "user buffer on a PVC", volumes: []corev1.Volume{gcsVolume("data", nil), pvc}, wantKept: []corev1.Volume{pvc}},
		{name: "user cache in RAM without cache options", volumes: []corev1.Volume{gcsVolume("data", nil), ramCache}, wantCache: true, wantKept: []corev1.Volume{ramCache}},
		{name: "user cache in RAM with cache options", volumes: []corev1.Volume{gcsVolume("data", map[string]string{contract.AttrFileCacheCapacity: "1Gi"}), ramCache}, wantCache: true, wantKept: []corev1.Volume{ramCache}},
		{name: "pod without volumes", volumes: nil},
		{name: "GKE driver's buffer and cache volumes", volumes: []corev1.Volume{gcsVolume("data", nil), gkeBuffer, gkeCache},
			wantCache: true, wantKept: []corev1.Volume{gkeBuffer, gkeCache}, bufferName: incumbentBufferVolume, cacheName: incumbentCacheVolume},
		{name: "ours win over the GKE driver's", volumes: []corev1.Volume{gcsVolume("data", nil), pvc, gkeBuffer, ramCache, gkeCache},
			wantCache: true, wantKept: []corev1.Volume{pvc, ramCache}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := newPod(func(p *corev1.Pod) { p.Spec.Volumes = tt.volumes; p.Spec.Containers[0].VolumeMounts = nil })
			_, out := mustAdmit(t, newMutator(t, modern), pod)
			c, _ := sidecarOf(t, out)
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			bufferName, cacheName := cmp.Or(tt.bufferName, contract.BufferVolumeName), cmp.Or(tt.cacheName, contract.CacheVolumeName)
			want := map[string]string{contract.TmpVolumeName: contract.TmpMountPath, bufferName: contract.BufferMountPath}
			if tt.wantCache {
				want[cacheName] = contract.CacheMountPath
			}
			if !reflect.DeepEqual(mounts, want) {
				t.Errorf("sidecar mounts = %v, want %v", mounts, want)
			}
			for name := range want {
				if _, n := volumeByName(out, name); n != 1 {
					t.Errorf("pod has %d volumes named %s, want 1", n, name)
				}
			}
			if _, n := volumeByName(out, contract.CacheVolumeName); !tt.wantCache && n != 0 {
				t.Errorf("a cache volume was added although no file cache was asked for")
			}
			if tt.bufferName == incumbentBufferVolume {
				if _, n := volumeByName(out, contract.BufferVolumeName); n != 0 {
					t.Errorf("a %s emptyDir was added beside the pod's %s", contract.BufferVolumeName, incumbentBufferVolume)
				}
			}
			for _, kept := range tt.wantKept {
				got, _ := volumeByName(out, kept.Name)
				if !reflect.DeepEqual(got, kept) {
					t.Errorf("user volume %s = %+v, want it unchanged %+v", kept.Name, got, kept)
				}
			}
			for _, v := range tt.volumes {
				if got, _ := volumeByName(out, v.Name); !reflect.DeepEqual(got, v) {
					t.Errorf("volume %s changed: %+v", v.Name, got)
				}
			}
			if v, _ := volumeByName(out, contract.TmpVolumeName); v.EmptyDir == nil {
				t.Errorf("%s is not an emptyDir: %+v", contract.TmpVolumeName, v)
			}
		})
	}
}

func assertDenied(t *testing.T, resp *admissionv1.AdmissionResponse, wantInMessage ...string) {
	t.Helper()
	if resp.Allowed {
		t.Fatalf("allowed, want a denial mentioning %q", wantInMessage)
	}
	if resp.Result == nil || resp.Result.Code != 400 {
		t.Fatalf("result = %+v, want code 400", resp.Result)
	}
	if resp.Patch != nil {
		t.Errorf("a denial carries a patch")
	}
	for _, s := range wantInMessage {
		if !strings.Contains(resp.Result.Message, s) {
			t.Errorf("message %q does not mention %q", resp.Result.Message, s)
		}
	}
}

func TestIdempotent(t *testing.T) {
	tests := []struct {
		name    string
		cluster fakeVersions
		pod     *corev1.Pod
	}{
		{"native", modern, newPod()},
		{"legacy", old, newPod()},
		{"native with cache and init containers", modern, newPod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{gcsVolume("data", map[string]string{contract.AttrFileCacheCapacity: "1Gi"})}
			p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/d"}}}}
		})},
		{"legacy with a lent image", old, newPod(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: contract.SidecarContainerName, Image: "example.com/x:1"})
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMutator(t, tt.cluster)
			first, once := mustAdmit(t, m, tt.pod)
			if first.Patch == nil {
				t.Fatal("first admission did not patch")
			}
			// Re-invocation, even if the cluster changed in between.
			for _, cv := range []fakeVersions{tt.cluster, modern, old} {
				second, twice := mustAdmit(t, newMutator(t, cv), once)
				if second.Patch != nil {
					t.Fatalf("second admission patched again: %s", second.Patch)
				}
				sidecarOf(t, twice) // exactly one sidecar
				if !reflect.DeepEqual(once, twice) {
					t.Errorf("pod changed on re-invocation")
				}
			}
		})
	}
}

func TestReinjectWhenOnlyOneMarkIsLeft(t *testing.T) {
	m := newMutator(t, modern)
	_, once := mustAdmit(t, m, newPod())

	t.Run("annotation without sidecar", func(t *testing.T) {
		p := once.DeepCopy()
		p.Spec.InitContainers = nil
		_, out := mustAdmit(t, m, p)
		assertMode(t, out, true)
	})
	t.Run("marked sidecar without annotation is a placeholder", func(t *testing.T) {
		p := once.DeepCopy()
		delete(p.Annotations, contract.AnnotationInjected)
		p.Spec.InitContainers[0].Image = "example.com/custom:2"
		resp, out := mustAdmit(t, m, p)
		if resp.Patch == nil {
			t.Fatal("no patch")
		}
		c, _ := sidecarOf(t, out)
		if c.Image != "example.com/custom:2" {
			t.Errorf("image = %q", c.Image)
		}
		assertMode(t, out, true)
	})
}

func TestBadAnnotations(t *testing.T) {
	tests := []struct {
		key, value string
	}{
		{contract.AnnotationInject, "yes"},
		{contract.AnnotationInject, "True"},
		{contract.AnnotationInject, ""},
		{contract.AnnotationSidecarMode, "Native"},
		{contract.AnnotationSidecarMode, ""},
		{contract.AnnotationSidecarMode, "sidecar"},
		{contract.AnnotationInjected, "yes"},
		{contract.AnnotationIgnoreContainers, "istio-proxy,Bad_Name"},
		{contract.AnnotationCPURequest, "one"},
		{contract.AnnotationCPULimit, "1 cpu"},
		{contract.AnnotationMemoryRequest, "1gb"},
		{contract.AnnotationMemoryLimit, ""},
		{contract.AnnotationEphemeralStorageRequest, "lots"},
		{contract.AnnotationEphemeralStorageLimit, "5Gi "},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			resp, _ := admit(t, newMutator(t, modern), newPod(annotate(tt.key, tt.value)))
			assertDenied(t, resp, tt.key, `"`+tt.value+`"`)
		})
	}
}

func TestGoodIgnoreContainers(t *testing.T) {
	for _, v := range []string{"", "istio-proxy", "istio-proxy, linkerd-proxy,"} {
		mustAdmit(t, newMutator(t, modern), newPod(annotate(contract.AnnotationIgnoreContainers, v)))
	}
}

func TestNotInjected(t *testing.T) {
	// A pod without a volume of the driver (an emptyDir in place of the bucket).
	pod := func(mods ...func(*corev1.Pod)) *corev1.Pod {
		return newPod(append([]func(*corev1.Pod){func(p *corev1.Pod) {
			delete(p.Annotations, contract.AnnotationInject)
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}}, mods...)...)
	}
	tests := []struct {
		name        string
		pod         *corev1.Pod
		wantWarning string
	}{
		{name: "no annotation", pod: pod()},
		{name: "no annotations at all", pod: pod(func(p *corev1.Pod) { p.Annotations = nil })},
		{name: "opted out", pod: pod(annotate(contract.AnnotationInject, "false"))},
		{
			name:        "opted out with a volume of the driver",
			pod:         pod(annotate(contract.AnnotationInject, "false"), func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{gcsVolume("data", nil)} }),
			wantWarning: "opts out of the gcsfuse sidecar",
		},
		{
			name:        "our annotations without the opt-in",
			pod:         pod(annotate(contract.AnnotationCPULimit, "not-a-quantity")),
			wantWarning: contract.AnnotationCPULimit,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, out := mustAdmit(t, newMutator(t, modern), tt.pod)
			if resp.Patch != nil {
				t.Errorf("patched: %s", resp.Patch)
			}
			if len(out.Spec.InitContainers)+len(out.Spec.Containers) != 1 {
				t.Errorf("containers changed")
			}
			if tt.wantWarning != "" && !containsSubstring(resp.Warnings, tt.wantWarning) {
				t.Errorf("warnings = %q, want one naming %s", resp.Warnings, tt.wantWarning)
			}
			if tt.wantWarning == "" && len(resp.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", resp.Warnings)
			}
		})
	}
}

func TestUnknownAnnotationWarning(t *testing.T) {
	typo := contract.AnnotationPrefix + "cpu-limt"
	resp, _ := mustAdmit(t, newMutator(t, modern), newPod(annotate(typo, "1")))
	if !containsSubstring(resp.Warnings, typo) {
		t.Errorf("warnings = %q, want one naming %s", resp.Warnings, typo)
	}
}

func TestOnlyPodCreationIsMutated(t *testing.T) {
	m := newMutator(t, modern)
	raw := mustJSON(t, newPod())
	tests := map[string]func(*admissionv1.AdmissionRequest){
		"update": func(r *admissionv1.AdmissionRequest) { r.Operation = admissionv1.Update },
		"delete": func(r *admissionv1.AdmissionRequest) { r.Operation = admissionv1.Delete },
		"deployment": func(r *admissionv1.AdmissionRequest) {
			r.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
		},
		"subresource": func(r *admissionv1.AdmissionRequest) { r.SubResource = "ephemeralcontainers" },
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			req := createRequest(t, raw)
			mod(req)
			resp := m.Mutate(context.Background(), req)
			if !resp.Allowed || resp.Patch != nil || resp.UID != req.UID {
				t.Errorf("response = %+v, want allowed unchanged with the UID", resp)
			}
		})
	}
}

func TestUndecodablePodIsDenied(t *testing.T) {
	for _, raw := range []string{``, `[]`, `{"spec":{"containers":"x"}}`, `{"metadata":{"annotations":{"a":1}}}`} {
		resp, _ := admitRaw(t, newMutator(t, modern), []byte(raw))
		assertDenied(t, resp, "decoding the pod")
	}
}

// TestPatchOnRawJSON applies the patch to hand-written pods, where lists may be absent,
// null or empty: the three need different JSON patch operations.
func TestPatchOnRawJSON(t *testing.T) {
	tests := []string{
		`{"metadata":{"annotations":{"gcsfuse.csi.storage/volumes":"true"}},"spec":{"containers":[{"name":"app","image":"x"}]}}`,
		`{"metadata":{"annotations":{"gcsfuse.csi.storage/volumes":"true"}},"spec":{"initContainers":[],"volumes":[],"containers":[{"name":"app","image":"x"}]}}`,
		`{"metadata":{"annotations":{"gcsfuse.csi.storage/volumes":"true"}},"spec":{"initContainers":null,"volumes":null,"containers":[{"name":"app","image":"x"}]}}`,
	}
	for _, raw := range tests {
		for _, cv := range []fakeVersions{modern, old} {
			_, out := admitRaw(t, newMutator(t, cv), []byte(raw))
			if out == nil {
				t.Fatalf("denied %s", raw)
			}
			sidecarOf(t, out)
			if _, n := volumeByName(out, contract.TmpVolumeName); n != 1 {
				t.Errorf("%s: %d tmp volumes", raw, n)
			}
		}
	}
}

func TestNewMutatorRejectsBadConfig(t *testing.T) {
	bad := testConfig()
	bad.SidecarImage = "UPPER:case"
	if _, err := NewMutator(bad, modern, nil); err == nil {
		t.Error("bad image accepted")
	}
	bad = testConfig()
	bad.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	if _, err := NewMutator(bad, modern, nil); err == nil {
		t.Error("default request above default limit accepted")
	}
	if _, err := NewMutator(testConfig(), nil, nil); err == nil {
		t.Error("nil versions accepted")
	}
}

// A private registry for the sidecar: the configured pull secrets are added to the pod's
// imagePullSecrets (once, after the pod's own), not when the pod lends its own sidecar
// image, and a bad Secret name is refused at start.
func TestSidecarPullSecrets(t *testing.T) {
	cfg := testConfig()
	cfg.SidecarPullSecrets = []string{"registry-a", "registry-b"}
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	refs := func(names ...string) []corev1.LocalObjectReference {
		var out []corev1.LocalObjectReference
		for _, n := range names {
			out = append(out, corev1.LocalObjectReference{Name: n})
		}
		return out
	}
	for _, tt := range []struct {
		name string
		have []corev1.LocalObjectReference
		lent bool
		want []corev1.LocalObjectReference
	}{
		{name: "none yet", want: refs("registry-a", "registry-b")},
		{name: "pod has its own", have: refs("mine"), want: refs("mine", "registry-a", "registry-b")},
		{name: "pod has one of them", have: refs("registry-b"), want: refs("registry-b", "registry-a")},
		{name: "lent sidecar image", lent: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, out := mustAdmit(t, m, newPod(func(p *corev1.Pod) {
				p.Spec.ImagePullSecrets = tt.have
				if tt.lent {
					p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: contract.SidecarContainerName, Image: "example.com/own/sidecar:1"})
				}
			}))
			want := tt.want
			if tt.lent {
				want = tt.have
			}
			if !reflect.DeepEqual(out.Spec.ImagePullSecrets, want) {
				t.Fatalf("imagePullSecrets = %v, want %v", out.Spec.ImagePullSecrets, want)
			}
		})
	}
	cfg.SidecarPullSecrets = []string{"Not_A_Secret"}
	if _, err := NewMutator(cfg, modern, discardLogger()); err == nil || !strings.Contains(err.Error(), "Not_A_Secret") {
		t.Fatalf("NewMutator with a bad secret name: %v", err)
	}
}

// nativeSidecarIndex is the index of the native sidecar among p's init containers.
func nativeSidecarIndex(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	for i, c := range p.Spec.InitContainers {
		if c.Name == contract.SidecarContainerName {
			return i
		}
	}
	t.Fatalf("no native sidecar in %v", names(p.Spec.InitContainers))
	return -1
}

// A hostNetwork pod whose volume sets hostNetworkPodKSA "true" without a federation
// provider would read as the node: refused (403), saying what to set; the same pod off the
// host network, with a provider, with a key Secret, with "false", opted out of the sidecar,
// or where the node plugin federates every volume, is admitted.
func TestHostNetworkPodKSARefused(t *testing.T) {
	const want = "hostNetworkPodKSA \"true\" asks that this hostNetwork pod read as its own Kubernetes service account"
	for _, tc := range []struct {
		name        string
		hostNetwork bool
		attrs       map[string]string
		refused     bool
	}{
		{"hostNetwork, no provider", true, map[string]string{"hostNetworkPodKSA": "true"}, true},
		{"not hostNetwork", false, map[string]string{"hostNetworkPodKSA": "true"}, false},
		{"hostNetwork, a provider", true, map[string]string{"hostNetworkPodKSA": "true", "identityProvider": "https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/prod-1"}, false},
		{"hostNetwork, false", true, map[string]string{"hostNetworkPodKSA": "false"}, false},
		{"hostNetwork, the node plugin federates", true, map[string]string{"hostNetworkPodKSA": "true"}, false},
		{"hostNetwork, a key Secret", true, map[string]string{"hostNetworkPodKSA": "true"}, false},
		{"hostNetwork, opted out", true, map[string]string{"hostNetworkPodKSA": "true"}, false},
	} {
		pod := newPod(func(p *corev1.Pod) {
			p.Spec.HostNetwork = tc.hostNetwork
			p.Spec.Volumes = []corev1.Volume{gcsVolume("data", tc.attrs)}
			if strings.Contains(tc.name, "Secret") {
				p.Spec.Volumes[0].CSI.NodePublishSecretRef = &corev1.LocalObjectReference{Name: "key"}
			}
			if strings.Contains(tc.name, "opted out") {
				p.Annotations[contract.AnnotationInject] = "false"
			}
		})
		m := newMutator(t, modern)
		m.cfg.NodeFederated = strings.Contains(tc.name, "federates")
		resp, _ := admit(t, m, pod)
		if tc.refused {
			if resp.Allowed || resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, want) || !strings.Contains(resp.Result.Message, "set "+contract.AttrWorkloadIdentityProvider) {
				t.Errorf("%s: allowed %v, result %+v; want 403 saying %q and what to set", tc.name, resp.Allowed, resp.Result, want)
			}
			continue
		}
		if !resp.Allowed {
			t.Errorf("%s: denied: %+v", tc.name, resp.Result)
		}
	}
}
