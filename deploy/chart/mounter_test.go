package chart

import (
	"regexp"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestMounter checks the node's shared mounter of the default render: the sidecar's image
// and binary in --mode=shared, unprivileged as the injected sidecar is (Pod Security
// "restricted" but for its one hostPath), on every node the node plugin runs on, handed its
// volumes through the directory the node plugin's --shared-dir names.
func TestMounter(t *testing.T) {
	r := render(t, otherNS)
	ds := only[*appsv1.DaemonSet](t, r, mounterName)
	spec := ds.Spec.Template.Spec
	c := mounterContainer(t, r)
	node := only[*appsv1.DaemonSet](t, r, nodeName)

	t.Run("the sidecar's security context: uid and gid 65534, no privilege, no capability, read-only root", func(t *testing.T) {
		wantUnprivileged(t, c.SecurityContext)
		if g := c.SecurityContext.RunAsGroup; g == nil || *g != contract.SidecarGID {
			t.Errorf("runAsGroup %s, want %d", deref(g), contract.SidecarGID)
		}
	})
	t.Run("Pod Security restricted but for its hostPath: no host namespace, port or token", func(t *testing.T) {
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("mounter pods share the host's network, PID or IPC namespace")
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("automountServiceAccountToken %s, want false: it talks to no API", deref(spec.AutomountServiceAccountToken))
		}
		if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 || len(spec.EphemeralContainers) != 0 {
			t.Errorf("mounter pods: %d containers, %d init containers; want the one container %s", len(spec.Containers), len(spec.InitContainers), contract.SharedMounterContainerName)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("host port %d", p.HostPort)
			}
		}
		for _, v := range spec.Volumes {
			switch {
			case v.HostPath != nil && v.Name == contract.TmpVolumeName:
			case v.EmptyDir != nil:
			default:
				t.Errorf("volume %s %+v: want the hand-off hostPath %s or an emptyDir", v.Name, v.VolumeSource, contract.TmpVolumeName)
			}
		}
	})
	t.Run("image: the sidecar the webhook injects", func(t *testing.T) {
		wantArg(t, webhookContainer(t, r), "--sidecar-image="+c.Image)
		if want := "gcsfuse-csi/sidecar:latest"; c.Image != want {
			t.Errorf("image %s, want %s", c.Image, want)
		}
	})
	t.Run("arguments", func(t *testing.T) {
		want := []string{"--mode=shared", "--grace-seconds=300", "--gcsfuse-memory-limit=512Mi", "--tmp-dir=" + contract.TmpMountPath,
			"--cache-dir=" + contract.CacheMountPath, "--buffer-dir=" + contract.BufferMountPath, "--termination-log=/dev/termination-log"}
		if !slices.Equal(c.Args, want) {
			t.Errorf("args %q, want %q", c.Args, want)
		}
		if len(c.Command) != 0 {
			t.Errorf("command %q, want the image's entrypoint (%s)", c.Command, contract.SidecarBinary)
		}
	})
	t.Run("its pod's name and namespace from the downward API", func(t *testing.T) {
		for env, path := range map[string]string{contract.EnvPodName: "metadata.name", contract.EnvPodNamespace: "metadata.namespace"} {
			e := named(t, c.Env, func(e corev1.EnvVar) string { return e.Name }, "env", env)
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
				t.Errorf("%s %+v, want fieldRef %s", env, e, path)
			}
		}
	})
	t.Run("hand-off directory: <kubeletDir>/plugins/<driverName>/shared/mounter, under the node plugin's --shared-dir", func(t *testing.T) {
		wantSharedDir(t, r, "/var/lib/kubelet", "gcsfuse.csi.storage")
	})
	t.Run("the file cache: an emptyDir with no size limit", func(t *testing.T) {
		v := volume(t, spec, contract.CacheVolumeName)
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit != nil {
			t.Errorf("volume %s %+v, want an emptyDir without sizeLimit", v.Name, v.VolumeSource)
		}
		wantMount(t, c, contract.CacheVolumeName, contract.CacheMountPath)
	})
	t.Run("grace: 300 s, the pod's and its --grace-seconds", func(t *testing.T) {
		if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 300 {
			t.Errorf("terminationGracePeriodSeconds %s, want 300", deref(g))
		}
		wantArg(t, c, "--grace-seconds=300")
	})
	t.Run("resources", func(t *testing.T) {
		wantResources(t, c, "10m", "64Mi", "2Gi")
	})
	t.Run("the node plugin's priority class and tolerations", func(t *testing.T) {
		if got, want := spec.PriorityClassName, node.Spec.Template.Spec.PriorityClassName; got != want || got != "system-node-critical" {
			t.Errorf("priorityClassName %q, the node plugin's %q, want both system-node-critical", got, want)
		}
		if got, want := spec.Tolerations, node.Spec.Template.Spec.Tolerations; !slices.Equal(got, want) {
			t.Errorf("tolerations %+v, the node plugin's %+v", got, want)
		}
		if len(spec.NodeSelector) != 0 || spec.Affinity != nil {
			t.Errorf("nodeSelector %v, affinity %+v; want none, as the node plugin's", spec.NodeSelector, spec.Affinity)
		}
	})
	t.Run("labels: the driver's, its own app, one node at a time", func(t *testing.T) {
		if got := ds.Labels["app.kubernetes.io/part-of"]; got != "gcsfuse-csi" {
			t.Errorf("labels %v, want app.kubernetes.io/part-of=gcsfuse-csi", ds.Labels)
		}
		if got := ds.Spec.Selector.MatchLabels; len(got) != 1 || got["app"] != mounterName {
			t.Errorf("selector %v, want app=%s", got, mounterName)
		}
		if got := ds.Spec.Template.Labels["app"]; got != mounterName {
			t.Errorf("pod labels %v, want app=%s", ds.Spec.Template.Labels, mounterName)
		}
		if ds.Namespace != otherNS {
			t.Errorf("namespace %q, want the release's, %s", ds.Namespace, otherNS)
		}
		if u := ds.Spec.UpdateStrategy; u.Type != appsv1.OnDeleteDaemonSetStrategyType {
			t.Errorf("updateStrategy %+v, want OnDelete: an upgrade must never replace a mounter under the mounts it serves", u)
		}
	})
	t.Run("the node plugin's --shared-linger", func(t *testing.T) {
		wantArg(t, nodeContainer(t, r), "--shared-linger=60s")
	})
	t.Run("each key's gcsfuse bounded: --gcsfuse-memory-limit", func(t *testing.T) {
		wantArg(t, c, "--gcsfuse-memory-limit=512Mi")
		wantArg(t, mounterContainer(t, show(t, "node/mounter.yaml", "--set", "mounter.memoryPerKey=2Gi")), "--gcsfuse-memory-limit=2Gi")
		refuteArg(t, mounterContainer(t, show(t, "node/mounter.yaml", "--set", "mounter.memoryPerKey=")), "--gcsfuse-memory-limit")
	})
}

// wantSharedDir fails t unless the node plugin's --shared-dir is <kubelet>/plugins/<driver>/shared
// and the mounter's hand-off volume is the hostPath mounter under it, mounted at its
// --tmp-dir without mount propagation, and the node plugin's view of the directory
// above it follows the host's unmounts.
func wantSharedDir(t *testing.T, r rendering, kubelet, driver string) {
	t.Helper()
	shared := kubelet + "/plugins/" + driver + "/shared"
	wantArg(t, nodeContainer(t, r), "--shared-dir="+shared)
	v := volume(t, only[*appsv1.DaemonSet](t, r, mounterName).Spec.Template.Spec, contract.TmpVolumeName)
	if h := v.HostPath; h == nil || h.Path != shared+"/mounter" || h.Type == nil || *h.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("mounter volume %s %+v, want hostPath %s/mounter (DirectoryOrCreate)", v.Name, v.VolumeSource, shared)
	}
	c := mounterContainer(t, r)
	m := wantMount(t, c, contract.TmpVolumeName, contract.TmpMountPath)
	if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
		t.Errorf("mount %s propagation %s, want none", m.Name, *m.MountPropagation)
	}
	wantArg(t, c, "--tmp-dir="+contract.TmpMountPath)
	// The node plugin's view of its plugin directory, where the shared mounts are: a
	// recursive bind of the host's, made with copies of the shared mounts live when the
	// node plugin starts. Only HostToContainer takes a copy away when the key is
	// unmounted; without it the dead mount stays in the node plugin's namespace, and its
	// mount point (rmdir: busy) and the shared directory with it.
	pm := wantMount(t, nodeContainer(t, r), "plugin-dir", "/csi")
	if pm.MountPropagation == nil || *pm.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("node plugin mount plugin-dir propagation %v, want HostToContainer", pm.MountPropagation)
	}
}

// wantMount fails t unless the container mounts volume name at path, and returns the mount.
func wantMount(t *testing.T, c corev1.Container, name, path string) corev1.VolumeMount {
	t.Helper()
	m := named(t, c.VolumeMounts, func(m corev1.VolumeMount) string { return m.Name }, "volume mount", name)
	if m.MountPath != path {
		t.Errorf("container %s mounts %s at %s, want %s", c.Name, name, m.MountPath, path)
	}
	return m
}

// wantResources fails t unless the container requests cpu and memory and limits memory to
// memLimit, with no CPU limit.
func wantResources(t *testing.T, c corev1.Container, cpu, mem, memLimit string) {
	t.Helper()
	for what, q := range map[string]struct {
		list corev1.ResourceList
		name corev1.ResourceName
		want string
	}{
		"cpu request":    {c.Resources.Requests, corev1.ResourceCPU, cpu},
		"memory request": {c.Resources.Requests, corev1.ResourceMemory, mem},
		"memory limit":   {c.Resources.Limits, corev1.ResourceMemory, memLimit},
	} {
		if got, ok := q.list[q.name]; !ok || got.Cmp(resource.MustParse(q.want)) != 0 {
			t.Errorf("%s %v, want %s", what, q.list[q.name], q.want)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a CPU limit, want none")
	}
}

// TestMounterDisabled: mounter.enabled=false renders no mounter and gives the node plugin no
// --shared-dir (it then refuses shared volumes), and leaves the rest of the driver as it is.
func TestMounterDisabled(t *testing.T) {
	r := render(t, otherNS, "--set", "mounter.enabled=false")
	for _, o := range r {
		if o.name == mounterName || o.source == "templates/node/mounter.yaml" {
			t.Errorf("mounter.enabled=false rendered %s", o)
		}
	}
	refuteScalar(t, r, "mounter.enabled=false", regexp.MustCompile(regexp.QuoteMeta(mounterName)))
	node := nodeContainer(t, r)
	refuteArg(t, node, "--shared-dir")
	refuteArg(t, node, "--shared-linger")
	refuteArg(t, node, "--shared-adc-namespaces")
	refuteArg(t, webhookContainer(t, r), "--shared-")
	all := render(t, otherNS)
	if got, want := len(r), len(all)-2; got != want {
		t.Errorf("mounter.enabled=false: %d objects, want %d (the default's %d less the mounter's DaemonSet and ServiceAccount)", got, want, len(all))
	}
}

// TestMounterIdentity: the mounter runs as a service account of its own, bound to no role;
// mounter.identityProvider and mounter.adcNamespaces reach the node plugin, and the webhook
// learns the same (the namespaces, and whether the node plugin federates every shared volume:
// a shared provider or a node-wide --wif-provider), so that both refuse the same pods.
func TestMounterIdentity(t *testing.T) {
	const provider = "identitynamespace:proj-1.svc.id.goog:https://container.googleapis.com/v1/projects/proj-1/locations/europe-west1/clusters/c1"
	r := render(t, otherNS)
	sa := only[*corev1.ServiceAccount](t, r, mounterName)
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the mounter's service account mounts its token")
	}
	if spec := only[*appsv1.DaemonSet](t, r, mounterName).Spec.Template.Spec; spec.ServiceAccountName != mounterName {
		t.Errorf("the mounter runs as %q, want its own %q (never the namespace's default)", spec.ServiceAccountName, mounterName)
	}
	for _, b := range slices.Concat(r.ofKind("RoleBinding"), r.ofKind("ClusterRoleBinding")) {
		var subjects []rbacv1.Subject
		switch rb := b.typed.(type) {
		case *rbacv1.RoleBinding:
			subjects = rb.Subjects
		case *rbacv1.ClusterRoleBinding:
			subjects = rb.Subjects
		}
		for _, sub := range subjects {
			if sub.Kind == "ServiceAccount" && sub.Name == mounterName {
				t.Errorf("%s binds the mounter's service account to a role", b)
			}
		}
	}
	// By default: no shared provider, ADC nowhere; the webhook refuses as the node plugin does.
	refuteArg(t, nodeContainer(t, r), "--shared-wif-provider")
	refuteArg(t, nodeContainer(t, r), "--shared-adc-namespaces")
	refuteArg(t, webhookContainer(t, r), "--shared-")

	r = render(t, otherNS, "--set", "mounter.identityProvider="+provider, "--set", "mounter.adcNamespaces={batch,team-*}")
	wantArg(t, nodeContainer(t, r), "--shared-wif-provider="+provider)
	wantArg(t, nodeContainer(t, r), "--shared-adc-namespaces=batch,team-*")
	wantArg(t, webhookContainer(t, r), "--shared-adc-namespaces=batch,team-*")
	wantArg(t, webhookContainer(t, r), "--shared-federated")

	refuteArg(t, webhookContainer(t, r), "--node-federated") // the mounter's provider alone

	r = render(t, otherNS, "--set", "node.extraArgs={--wif-provider="+provider+"}")
	wantArg(t, webhookContainer(t, r), "--shared-federated")
	wantArg(t, webhookContainer(t, r), "--node-federated")
	r = render(t, otherNS, "--set", "node.wifProvider="+provider)
	wantArg(t, nodeContainer(t, r), "--wif-provider="+provider)
	wantArg(t, webhookContainer(t, r), "--shared-federated")
	wantArg(t, webhookContainer(t, r), "--node-federated")
	r = render(t, otherNS, "--set", "node.extraArgs={--wif-provider=}")
	refuteArg(t, webhookContainer(t, r), "--shared-federated")
	refuteArg(t, webhookContainer(t, r), "--node-federated")
}

// TestMounterValues: the mounter's values reach its pod, and linger the node plugin.
func TestMounterValues(t *testing.T) {
	t.Run("linger reaches the node plugin's --shared-linger", func(t *testing.T) {
		c := nodeContainer(t, show(t, "node/daemonset.yaml", "--set", "mounter.linger=5m30s"))
		wantArg(t, c, "--shared-linger=5m30s")
		refuteArg(t, c, "--shared-linger=60s")
	})
	r := show(t, "node/mounter.yaml", "--set", "mounter.resources.requests.cpu=250m,mounter.resources.requests.memory=512Mi",
		"--set", "mounter.resources.limits.memory=4Gi", "--set", "mounter.terminationGracePeriodSeconds=900",
		"--set", "mounter.cacheSizeLimit=50Gi", "--set", "mounter.priorityClassName=gcsfuse-mounter")
	spec := only[*appsv1.DaemonSet](t, r, mounterName).Spec.Template.Spec
	c := mounterContainer(t, r)
	t.Run("resources", func(t *testing.T) { wantResources(t, c, "250m", "512Mi", "4Gi") })
	t.Run("terminationGracePeriodSeconds: the pod's and --grace-seconds", func(t *testing.T) {
		if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 900 {
			t.Errorf("terminationGracePeriodSeconds %s, want 900", deref(g))
		}
		wantArg(t, c, "--grace-seconds=900")
		refuteArg(t, c, "--grace-seconds=300")
	})
	t.Run("cacheSizeLimit: the file cache emptyDir's sizeLimit", func(t *testing.T) {
		v := volume(t, spec, contract.CacheVolumeName)
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Cmp(resource.MustParse("50Gi")) != 0 {
			t.Errorf("volume %s %+v, want an emptyDir with sizeLimit 50Gi", v.Name, v.VolumeSource)
		}
	})
	t.Run("priorityClassName", func(t *testing.T) {
		if spec.PriorityClassName != "gcsfuse-mounter" {
			t.Errorf("priorityClassName %q, want gcsfuse-mounter", spec.PriorityClassName)
		}
		none := only[*appsv1.DaemonSet](t, show(t, "node/mounter.yaml", "--set", "mounter.priorityClassName="), mounterName)
		if pc := none.Spec.Template.Spec.PriorityClassName; pc != "" {
			t.Errorf("mounter.priorityClassName empty: priorityClassName %q, want none", pc)
		}
	})
	t.Run("imagePullSecrets: the release namespace's", func(t *testing.T) {
		ds := only[*appsv1.DaemonSet](t, show(t, "node/mounter.yaml", "--set", "imagePullSecrets[0].name=team-registry"), mounterName)
		if want := []corev1.LocalObjectReference{{Name: "team-registry"}}; !slices.Equal(ds.Spec.Template.Spec.ImagePullSecrets, want) {
			t.Errorf("imagePullSecrets %v, want %v", ds.Spec.Template.Spec.ImagePullSecrets, want)
		}
	})
}
