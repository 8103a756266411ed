package chart

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestController checks the controller (the dynamic provisioner) of the default render: it
// runs unprivileged with the security context below, with the driver's name, Application
// Default Credentials, leader election in the release namespace and its /healthz probed,
// and RBAC that is exactly what provisioning needs.
func TestController(t *testing.T) {
	r := render(t, otherNS)
	dep := only[*appsv1.Deployment](t, r, controllerName)
	spec := dep.Spec.Template.Spec
	c := controllerContainer(t, r)

	t.Run("security context: non-root, no privilege, no capability, read-only root", func(t *testing.T) {
		wantUnprivileged(t, c.SecurityContext)
	})
	t.Run("no host access, no volume", func(t *testing.T) {
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("controller pods share the host's network, PID or IPC namespace")
		}
		if len(spec.Volumes) != 0 || len(c.VolumeMounts) != 0 {
			t.Errorf("controller pods: volumes %+v, mounts %+v; want none by default", spec.Volumes, c.VolumeMounts)
		}
	})
	t.Run("arguments", func(t *testing.T) {
		wantArg(t, c, "--driver-name=gcsfuse.csi.storage")
		wantArg(t, c, "--gcs-auth=adc")
		wantArg(t, c, "--metrics-addr=:9810")
		refuteArg(t, c, "--gcs-endpoint") // node.gcsEndpoint is empty: Google Cloud Storage
		refuteArg(t, c, "--kubeconfig")   // in-cluster
	})
	// deploy/overlays/local's kustomize patch replaces args[1] with --gcs-auth=none.
	t.Run("--gcs-auth is args[1], where the local overlay replaces it", func(t *testing.T) {
		if len(c.Args) < 2 || !strings.HasPrefix(c.Args[1], "--gcs-auth=") {
			t.Errorf("controller args %q: want --gcs-auth= second (deploy/overlays/local/kustomization.yaml replaces /args/1)", c.Args)
		}
	})
	t.Run("POD_NAMESPACE from the downward API: the leader election Lease's namespace", func(t *testing.T) {
		env := named(t, c.Env, func(e corev1.EnvVar) string { return e.Name }, "env", "POD_NAMESPACE")
		if env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
			t.Errorf("POD_NAMESPACE %+v, want fieldRef metadata.namespace", env)
		}
	})
	t.Run("two replicas, spread over nodes when possible", func(t *testing.T) {
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
			t.Errorf("replicas %s, want 2", deref(dep.Spec.Replicas))
		}
		aff := spec.Affinity
		if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			t.Errorf("no preferred pod anti-affinity: %+v", aff)
		}
	})
	t.Run("probes GET /healthz on the metrics port", func(t *testing.T) {
		if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9810 {
			t.Errorf("ports %+v, want one, metrics: 9810", c.Ports)
		}
		for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != intstr.FromString("metrics") {
				t.Errorf("%s probe %+v, want an HTTP GET of /healthz on port metrics", what, p)
			}
		}
		if got := dep.Spec.Template.Annotations["prometheus.io/port"]; got != "9810" {
			t.Errorf("pod annotation prometheus.io/port=%q, want 9810", got)
		}
	})
	t.Run("resources", func(t *testing.T) {
		for what, q := range map[string]struct {
			list corev1.ResourceList
			name corev1.ResourceName
			want string
		}{
			"cpu request":    {c.Resources.Requests, corev1.ResourceCPU, "10m"},
			"memory request": {c.Resources.Requests, corev1.ResourceMemory, "32Mi"},
			"memory limit":   {c.Resources.Limits, corev1.ResourceMemory, "128Mi"},
		} {
			if got, ok := q.list[q.name]; !ok || got.Cmp(resource.MustParse(q.want)) != 0 {
				t.Errorf("%s %v, want %s", what, q.list[q.name], q.want)
			}
		}
		if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
			t.Error("a CPU limit, want none")
		}
	})

	sa := only[*corev1.ServiceAccount](t, r, controllerName)
	t.Run("its own ServiceAccount in the release namespace", func(t *testing.T) {
		if spec.ServiceAccountName != sa.Name || sa.Namespace != otherNS {
			t.Errorf("pods run as %q; ServiceAccount %s/%s", spec.ServiceAccountName, sa.Namespace, sa.Name)
		}
	})
	t.Run("ClusterRole: provisioning, nothing more", func(t *testing.T) {
		wantRules(t, only[*rbacv1.ClusterRole](t, r, controllerName).Rules, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "delete", "update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		})
		b := only[*rbacv1.ClusterRoleBinding](t, r, controllerName)
		wantBinding(t, b.RoleRef, b.Subjects, "ClusterRole", sa)
	})
	t.Run("Role: leader election Leases in the release namespace only", func(t *testing.T) {
		role := only[*rbacv1.Role](t, r, controllerName)
		if role.Namespace != otherNS {
			t.Errorf("Role in namespace %q, want %s", role.Namespace, otherNS)
		}
		wantRules(t, role.Rules, []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		})
		b := only[*rbacv1.RoleBinding](t, r, controllerName)
		if b.Namespace != otherNS {
			t.Errorf("RoleBinding in namespace %q, want %s", b.Namespace, otherNS)
		}
		wantBinding(t, b.RoleRef, b.Subjects, "Role", sa)
	})
}

// wantUnprivileged fails t unless a container's security context is the driver's unprivileged
// one: non-root (uid 65534), no privilege escalation, every capability dropped, a read-only
// root file system, the RuntimeDefault seccomp profile (what the "restricted" Pod Security
// Standard asks of a container, and more).
func wantUnprivileged(t *testing.T, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil {
		t.Fatal("no securityContext")
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("runAsNonRoot %s, want true", deref(sc.RunAsNonRoot))
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 65534 {
		t.Errorf("runAsUser %s, want 65534", deref(sc.RunAsUser))
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation %s, want false", deref(sc.AllowPrivilegeEscalation))
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: true")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and no add", sc.Capabilities)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem %s, want true", deref(sc.ReadOnlyRootFilesystem))
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile %+v, want RuntimeDefault", sc.SeccompProfile)
	}
}

// deref prints what a pointer field holds, or "unset".
func deref[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

// wantRules fails t unless the rules are exactly want, in order.
func wantRules(t *testing.T, got, want []rbacv1.PolicyRule) {
	t.Helper()
	eq := func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
			slices.Equal(a.Verbs, b.Verbs) && len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
	}
	if !slices.EqualFunc(got, want, eq) {
		t.Errorf("rules\n  %+v\nwant\n  %+v", got, want)
	}
}

// wantBinding fails t unless a binding grants the controller's role of kind to sa alone.
func wantBinding(t *testing.T, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind string, sa *corev1.ServiceAccount) {
	t.Helper()
	if ref.Kind != kind || ref.Name != controllerName || ref.APIGroup != rbacv1.GroupName {
		t.Errorf("roleRef %+v, want %s %s", ref, kind, controllerName)
	}
	if len(subjects) != 1 || subjects[0].Kind != rbacv1.ServiceAccountKind || subjects[0].Name != sa.Name || subjects[0].Namespace != sa.Namespace {
		t.Errorf("subjects %+v, want the ServiceAccount %s/%s", subjects, sa.Namespace, sa.Name)
	}
}

// TestControllerDisabled: controller.enabled=false renders none of its objects, and leaves
// the rest of the driver as it is.
func TestControllerDisabled(t *testing.T) {
	r := render(t, otherNS, "--set", "controller.enabled=false")
	for _, o := range r {
		if o.name == controllerName || strings.HasPrefix(o.source, "templates/controller/") {
			t.Errorf("controller.enabled=false rendered %s", o)
		}
	}
	refuteScalar(t, r, "controller.enabled=false", regexp.MustCompile(regexp.QuoteMeta(controllerName)))
	all := render(t, otherNS)
	if got, want := len(r), len(all)-6; got != want {
		t.Errorf("controller.enabled=false: %d objects, want %d (the default's %d less the controller's Deployment, ServiceAccount, ClusterRole, Role and their bindings)", got, want, len(all))
	}
}

// TestControllerValues: the controller's values reach its pod.
func TestControllerValues(t *testing.T) {
	t.Run("its own gcsEndpoint wins over node.gcsEndpoint; gcsAuth none", func(t *testing.T) {
		c := controllerContainer(t, show(t, "controller/deployment.yaml", "--set", "node.gcsEndpoint=https://storage.corp/storage/v1/",
			"--set", "controller.gcsEndpoint=http://emulator:4443/storage/v1/,controller.gcsAuth=none"))
		wantArg(t, c, "--gcs-endpoint=http://emulator:4443/storage/v1/")
		refuteArg(t, c, "--gcs-endpoint=https://storage.corp")
		wantArg(t, c, "--gcs-auth=none")
	})
	t.Run("metricsPort 0: no metrics, no probes", func(t *testing.T) {
		r := show(t, "controller/deployment.yaml", "--set", "controller.metricsPort=0")
		c := controllerContainer(t, r)
		refuteArg(t, c, "--metrics-addr")
		if len(c.Ports) != 0 || c.ReadinessProbe != nil || c.LivenessProbe != nil {
			t.Errorf("ports %+v, readiness %+v, liveness %+v; want none", c.Ports, c.ReadinessProbe, c.LivenessProbe)
		}
		if a := only[*appsv1.Deployment](t, r, controllerName).Spec.Template.Annotations; len(a) != 0 {
			t.Errorf("pod annotations %v, want none", a)
		}
	})
	t.Run("replicas, extraArgs, extraEnv", func(t *testing.T) {
		r := show(t, "controller/deployment.yaml", "--set", "controller.replicas=1", "--set", "controller.extraArgs={-v}",
			"--set", "controller.extraEnv[0].name=HTTPS_PROXY,controller.extraEnv[0].value=http://proxy.corp:3128")
		if n := only[*appsv1.Deployment](t, r, controllerName).Spec.Replicas; n == nil || *n != 1 {
			t.Errorf("replicas %s, want 1", deref(n))
		}
		c := controllerContainer(t, r)
		wantArg(t, c, "-v")
		if e := named(t, c.Env, func(e corev1.EnvVar) string { return e.Name }, "env", "HTTPS_PROXY"); e.Value != "http://proxy.corp:3128" {
			t.Errorf("HTTPS_PROXY=%q", e.Value)
		}
	})
	t.Run("credentialsSecret: the key mounted read-only, named by GOOGLE_APPLICATION_CREDENTIALS", func(t *testing.T) {
		dep := only[*appsv1.Deployment](t, show(t, "controller/deployment.yaml",
			"--set", "controller.credentialsSecret.name=gcs-key,controller.credentialsSecret.key=sa.json"), controllerName)
		c := container(t, dep.Spec.Template.Spec, controllerName)
		v := volume(t, dep.Spec.Template.Spec, "gcs-key")
		if v.Secret == nil || v.Secret.SecretName != "gcs-key" {
			t.Fatalf("volume gcs-key %+v, want Secret gcs-key", v.VolumeSource)
		}
		m := named(t, c.VolumeMounts, func(m corev1.VolumeMount) string { return m.Name }, "volume mount", "gcs-key")
		if !m.ReadOnly {
			t.Error("the key's mount is writable")
		}
		e := named(t, c.Env, func(e corev1.EnvVar) string { return e.Name }, "env", "GOOGLE_APPLICATION_CREDENTIALS")
		if want := m.MountPath + "/sa.json"; e.Value != want {
			t.Errorf("GOOGLE_APPLICATION_CREDENTIALS=%q, want %s", e.Value, want)
		}
	})
	t.Run("serviceAccountAnnotations", func(t *testing.T) {
		sa := only[*corev1.ServiceAccount](t, show(t, "controller/rbac.yaml",
			"--set-string", "controller.serviceAccountAnnotations.iam\\.gke\\.io/gcp-service-account=provisioner@p.iam.gserviceaccount.com"), controllerName)
		if got := sa.Annotations["iam.gke.io/gcp-service-account"]; got != "provisioner@p.iam.gserviceaccount.com" {
			t.Errorf("ServiceAccount annotations %v", sa.Annotations)
		}
	})
}
