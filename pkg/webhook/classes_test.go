package webhook

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func ptr[T any](v T) *T { return &v }

// storageClass is a StorageClass of provisioner with params, made at second created of
// the clock (for the pick of the default class), the default one with isDefault.
func storageClass(name, provisioner string, params map[string]string, isDefault bool, created int64) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(created, 0))},
		Provisioner: provisioner, Parameters: params,
	}
	if isDefault {
		sc.Annotations = map[string]string{annotationDefaultClass: "true"}
	}
	return sc
}

// gcsParams are a valid class of the driver's that asks for a file cache.
var gcsParams = map[string]string{contract.AttrBucketName: "data", classparams.ParamPathPrefix: "claims", contract.AttrFileCacheCapacity: "1Gi"}

// pendingClaim is a claim in namespace ns of class (nil: the field is absent), not bound.
func pendingClaim(name string, class *string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: class}}
}

// ephemeralVolume is a generic ephemeral volume whose claim template asks for class (nil:
// the default class).
func ephemeralVolume(name string, class *string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		}},
	}}}
}

// classCluster is a cluster's claims and StorageClasses: gcs (the driver's), gcs-bad (the
// driver's, with parameters its provisioner refuses), other (another provisioner's),
// static (no provisioner) and gke (the GKE driver's name); withDefault makes a class of the
// driver the default one (beside an older default of another provisioner, which loses).
func classCluster(withDefault bool) []runtime.Object {
	objs := []runtime.Object{
		storageClass("gcs", contract.DriverName, gcsParams, false, 100),
		storageClass("gcs-bad", contract.DriverName, map[string]string{
			classparams.ParamPathPrefix: "claims", contract.AttrFileCacheCapacity: "1Gi",
			"csi.storage.k8s.io/provisioner-secret-name": "s"}, false, 100),
		storageClass("other", "ebs.csi.aws.com", map[string]string{contract.AttrFileCacheCapacity: "1Gi"}, false, 100),
		storageClass("static", noProvisioner, nil, false, 100),
		storageClass("gke", contract.IncumbentDriverName, gcsParams, false, 100),
		storageClass("older-default", "ebs.csi.aws.com", nil, true, 50),
		pendingClaim("c-gcs", ptr("gcs")),
		pendingClaim("c-gcs-bad", ptr("gcs-bad")),
		pendingClaim("c-other", ptr("other")),
		pendingClaim("c-static", ptr("static")),
		pendingClaim("c-none", ptr("")),
		pendingClaim("c-missing", ptr("nosuch")),
		pendingClaim("c-default", nil),
		pendingClaim("c-gke", ptr("gke")),
	}
	if withDefault {
		objs = append(objs, storageClass("gcs-default", contract.DriverName, gcsParams, true, 200))
	}
	return objs
}

// A claim not bound yet, and a generic ephemeral volume, are the driver's when their
// StorageClass's provisioner is the driver: the pod gets the sidecar without the
// annotation, and the class's attributes decide the file cache as a PersistentVolume's
// would. Another provisioner's class is certainly not ours (no warning); no class, or one
// that provisions nothing, leaves a claim unresolved as before; a class that cannot be read
// is unresolved with its error.
func TestUnboundClaimsThroughTheirClass(t *testing.T) {
	noAnnotation := func(vols ...corev1.Volume) *corev1.Pod {
		return newPod(func(p *corev1.Pod) {
			delete(p.Annotations, contract.AnnotationInject)
			p.Spec.Volumes = vols
		})
	}
	for _, tt := range []struct {
		name        string
		withDefault bool
		driver      string
		pod         *corev1.Pod
		inject      bool
		wantWarning string
	}{
		{name: "claim of the driver's class", pod: noAnnotation(claimVolume("data", "c-gcs")), inject: true},
		{name: "claim of another provisioner's class", pod: noAnnotation(claimVolume("data", "c-other"))},
		{name: "claim of a class that does not exist", pod: noAnnotation(claimVolume("data", "c-missing")),
			wantWarning: `volume data: cannot tell whether claim c-missing is a gcsfuse.csi.storage volume (StorageClass nosuch: storageclasses.storage.k8s.io "nosuch" not found)`},
		{name: "claim of no class", pod: noAnnotation(claimVolume("data", "c-none")), wantWarning: "claim c-none is not bound"},
		{name: "claim of a class without provisioner", pod: noAnnotation(claimVolume("data", "c-static")), wantWarning: "claim c-static is not bound"},
		{name: "claim without a class, the default the driver's", withDefault: true, pod: noAnnotation(claimVolume("data", "c-default")), inject: true},
		{name: "claim without a class, the default another's", pod: noAnnotation(claimVolume("data", "c-default"))},
		{name: "claim of the driver's class with bad parameters", pod: noAnnotation(claimVolume("data", "c-gcs-bad")), inject: true},
		{name: "claim of the GKE driver's class, installed under that name", driver: contract.IncumbentDriverName,
			pod: noAnnotation(claimVolume("data", "c-gke")), inject: true},
		{name: "claim of the GKE driver's class", pod: noAnnotation(claimVolume("data", "c-gke"))},
		{name: "ephemeral volume of the driver's class", pod: noAnnotation(ephemeralVolume("data", ptr("gcs"))), inject: true},
		{name: "ephemeral volume of the default class, the driver's", withDefault: true, pod: noAnnotation(ephemeralVolume("data", nil)), inject: true},
		{name: "ephemeral volume of the default class, another's", pod: noAnnotation(ephemeralVolume("data", nil))},
		{name: "ephemeral volume of another provisioner's class", pod: noAnnotation(ephemeralVolume("data", ptr("other")))},
		{name: "ephemeral volume of no class", pod: noAnnotation(ephemeralVolume("data", ptr("")))},
		{name: "ephemeral volume of the driver's class with bad parameters", pod: noAnnotation(ephemeralVolume("data", ptr("gcs-bad"))), inject: true},
		{name: "ephemeral volume of a class that does not exist", pod: noAnnotation(ephemeralVolume("data", ptr("nosuch"))),
			wantWarning: `volume data: cannot tell whether its ephemeral claim is a gcsfuse.csi.storage volume (StorageClass nosuch: storageclasses.storage.k8s.io "nosuch" not found)`},
		{name: "ephemeral volume of a class without provisioner", pod: noAnnotation(ephemeralVolume("data", ptr("static")))},
		{name: "opted out", pod: newPod(annotate(contract.AnnotationInject, "false"), func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{claimVolume("claim", "c-gcs"), ephemeralVolume("eph", ptr("gcs")), ephemeralVolume("data", ptr("other"))}
		}), wantWarning: "the pod mounts gcsfuse.csi.storage volume claim, eph but opts out"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.DriverName = tt.driver
			cfg.Claims = KubeVolumeClaims{Client: fake.NewClientset(classCluster(tt.withDefault)...)}
			m, err := NewMutator(cfg, modern, discardLogger())
			if err != nil {
				t.Fatal(err)
			}
			checkCachedInjection(t, m, tt.pod, tt.inject, tt.wantWarning)
		})
	}
}

// The volumes recognised through their class are the driver's for every decision, as
// bound ones: an init container mounting an ephemeral volume of the driver's class gets the
// native sidecar before it and is listed in contract.EnvInitContainers, and a legacy pod
// with one is refused. A class is looked up once per admission however many volumes name
// it, and the default class once.
func TestClassVolumesInitContainersAndLookups(t *testing.T) {
	cs := fake.NewClientset(classCluster(true)...)
	cfg := testConfig()
	cfg.Claims = KubeVolumeClaims{Client: cs}
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod(func(p *corev1.Pod) {
		delete(p.Annotations, contract.AnnotationInject)
		p.Spec.Volumes = []corev1.Volume{ephemeralVolume("data", ptr("gcs")), ephemeralVolume("more", ptr("gcs")),
			claimVolume("claimed", "c-gcs"), ephemeralVolume("dflt", nil), claimVolume("dflt-claim", "c-default")}
		p.Spec.InitContainers = []corev1.Container{mounting("warmup", "data")}
	})
	_, out := mustAdmit(t, m, pod)
	if got, want := names(out.Spec.InitContainers), []string{contract.SidecarContainerName, "warmup"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("init containers = %v, want %v", got, want)
	}
	c, _ := sidecarOf(t, out)
	if got := envOf(c)[contract.EnvInitContainers]; got != "warmup" {
		t.Errorf("%s = %q, want warmup", contract.EnvInitContainers, got)
	}
	counts := map[string]int{}
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "storageclasses" {
			key := a.GetVerb()
			if g, ok := a.(interface{ GetName() string }); ok {
				key += " " + g.GetName()
			}
			counts[key]++
		}
	}
	if want := map[string]int{"get gcs": 1, "list": 1}; !reflect.DeepEqual(counts, want) {
		t.Errorf("StorageClass lookups %v, want %v", counts, want)
	}

	cfg.Claims = KubeVolumeClaims{Client: fake.NewClientset(classCluster(true)...)}
	legacy, err := NewMutator(cfg, old, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.Volumes = []corev1.Volume{ephemeralVolume("data", ptr("gcs"))}
	resp, _ := admit(t, legacy, pod)
	assertDenied(t, resp, "init container warmup (volume data)", "Pending forever")
}

func TestKubeClassVolume(t *testing.T) {
	older := storageClass("a-default", contract.DriverName, gcsParams, true, 100)
	beta := storageClass("b-default", "ebs.csi.aws.com", nil, false, 200)
	beta.Annotations = map[string]string{annotationBetaDefaultClass: "true"}
	sameTime := storageClass("c-default", "pd.csi.storage.gke.io", nil, true, 200)
	notDefault := storageClass("newest", contract.DriverName, nil, false, 300)
	notDefault.Annotations = map[string]string{annotationDefaultClass: "false"}
	for _, tt := range []struct {
		name    string
		classes []runtime.Object
		class   *string
		want    ClassedVolume
		wantErr string
	}{
		{name: "named", classes: []runtime.Object{older}, class: ptr("a-default"),
			want: ClassedVolume{Class: "a-default", Provisioner: contract.DriverName, Parameters: gcsParams}},
		{name: "no class", classes: []runtime.Object{older}, class: ptr("")},
		{name: "missing", classes: []runtime.Object{older}, class: ptr("nosuch"), wantErr: `StorageClass nosuch: storageclasses.storage.k8s.io "nosuch" not found`},
		{name: "default", classes: []runtime.Object{older, notDefault},
			want: ClassedVolume{Class: "a-default", Provisioner: contract.DriverName, Parameters: gcsParams}},
		{name: "newest default, then by name, beta annotation too", classes: []runtime.Object{older, sameTime, beta, notDefault},
			want: ClassedVolume{Class: "b-default", Provisioner: "ebs.csi.aws.com"}},
		{name: "no default", classes: []runtime.Object{notDefault}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := KubeVolumeClaims{Client: fake.NewClientset(tt.classes...)}.ClassVolume(context.Background(), tt.class)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ClassVolume = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// The attributes of a class of the driver are classparams'; a class the provisioner
// refuses still gives its parameters, but pathPrefix and the reserved keys.
func TestClassAttributes(t *testing.T) {
	if got, want := classAttributes(gcsParams), map[string]string{contract.AttrBucketName: "data", contract.AttrFileCacheCapacity: "1Gi"}; !reflect.DeepEqual(got, want) {
		t.Errorf("valid class: %v, want %v", got, want)
	}
	bad := map[string]string{contract.AttrBucketName: "data", classparams.ParamPathPrefix: "a/../b", contract.AttrMountOptions: "implicit-dirs",
		"csi.storage.k8s.io/provisioner-secret-name": "s"}
	if got, want := classAttributes(bad), map[string]string{contract.AttrBucketName: "data", contract.AttrMountOptions: "implicit-dirs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("refused class: %v, want %v", got, want)
	}
}

// checkCachedInjection admits pod and checks that it gets the native sidecar with the file
// cache volume (the volume's attributes ask for a cache) when inject is set, none otherwise,
// and exactly the warning wantWarning ("" for none).
func checkCachedInjection(t *testing.T, m *Mutator, pod *corev1.Pod, inject bool, wantWarning string) {
	t.Helper()
	resp, out := mustAdmit(t, m, pod)
	injected := out.Annotations[contract.AnnotationInjected] != ""
	if injected != inject {
		t.Fatalf("injected = %v, want %v (patch %s, warnings %q)", injected, inject, resp.Patch, resp.Warnings)
	}
	if injected {
		c, isInit := sidecarOf(t, out)
		if !isInit || !hasVolume(out, contract.CacheVolumeName) {
			t.Errorf("native %v, cache volume %v; want both (sidecar mounts %v)", isInit, hasVolume(out, contract.CacheVolumeName), c.VolumeMounts)
		}
	}
	if wantWarning != "" && !containsSubstring(resp.Warnings, wantWarning) {
		t.Fatalf("warnings = %q, want one with %q", resp.Warnings, wantWarning)
	}
	if wantWarning == "" && len(resp.Warnings) > 0 {
		t.Fatalf("unexpected warnings %q", resp.Warnings)
	}
}

// A class of the driver whose mountOptions ask for the file cache (the provisioner gives
// them to each PersistentVolume as spec.mountOptions) resolves to attributes that do.
func TestClassMountOptionsFileCache(t *testing.T) {
	cs := fake.NewClientset(&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "cached"}, Provisioner: contract.DriverName,
		Parameters: map[string]string{contract.AttrBucketName: "data"}, MountOptions: []string{"implicit-dirs", "file-cache:max-size-mb:-1"}})
	l := &classLookups{claims: KubeVolumeClaims{Client: cs}, driver: contract.DriverName, done: map[string]classLookup{}}
	d, attrs, err := l.resolve(context.Background(), ptr("cached"))
	if err != nil || d != classOurs || !wantsFileCache(driverVolumes{"v": attrs}) {
		t.Fatalf("resolve = %v, %v, %v; want the driver's, asking for a file cache", d, attrs, err)
	}
	if attrs[contract.AttrMountOptions] != "implicit-dirs,file-cache:max-size-mb:-1" {
		t.Errorf("mountOptions %q, want the class's", attrs[contract.AttrMountOptions])
	}
}
