package ownership

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func ptr[T any](v T) *T { return &v }

func container(name string, uid *int64, volumes ...string) corev1.Container {
	c := corev1.Container{Name: name}
	if uid != nil {
		c.SecurityContext = &corev1.SecurityContext{RunAsUser: uid}
	}
	for _, v := range volumes {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/" + v})
	}
	return c
}

func pod(podUID *int64, init []corev1.Container, containers ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: init, Containers: containers}}
	if podUID != nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: podUID}
	}
	return p
}

func TestDecide(t *testing.T) {
	sidecar := container("gcsfuse-sidecar", ptr(int64(65534)))
	for _, tt := range []struct {
		name  string
		flags []string
		req   Request
		want  []string
	}{
		{name: "root pod, no fsGroup: unchanged",
			req: Request{Pod: pod(nil, nil, container("app", nil, "v")), Volume: "v"}},
		{name: "runAsUser 0 is root: unchanged",
			req: Request{Pod: pod(ptr(int64(0)), nil, container("app", nil, "v")), Volume: "v"}},
		{name: "unknown pod, no fsGroup: unchanged", req: Request{Volume: "v"}},
		{name: "fsGroup: group and group-writable modes",
			req:  Request{MountGroup: "50000", Volume: "v"},
			want: []string{"--gid=50000", "--file-mode=664", "--dir-mode=775"}},
		{name: "Airflow: uid 50000, gid 0, fsGroup",
			req:  Request{MountGroup: "50000", Pod: pod(ptr(int64(50000)), nil, container("base", nil, "v")), Volume: "v"},
			want: []string{"--gid=50000", "--file-mode=664", "--dir-mode=775", "--uid=50000"}},
		{name: "runAsUser alone, on the pod",
			req:  Request{Pod: pod(ptr(int64(1000)), nil, container("app", nil, "v")), Volume: "v"},
			want: []string{"--uid=1000"}},
		{name: "runAsUser on the container wins over the pod's",
			req:  Request{Pod: pod(ptr(int64(0)), nil, container("app", ptr(int64(1000)), "v")), Volume: "v"},
			want: []string{"--uid=1000"}},
		{name: "init container and app as the same uid, sidecar skipped",
			req: Request{Pod: pod(nil, []corev1.Container{sidecar, container("seed", ptr(int64(7)), "v")}, container("app", ptr(int64(7)), "v")),
				Volume: "v", Skip: "gcsfuse-sidecar"},
			want: []string{"--uid=7"}},
		{name: "an init container as another uid than the app: unchanged (it would get EACCES)",
			req: Request{Pod: pod(nil, []corev1.Container{container("seed", ptr(int64(8)), "v")}, container("app", ptr(int64(7)), "v")),
				Volume: "v"}},
		{name: "an init container as root: unchanged",
			req: Request{Pod: pod(nil, []corev1.Container{container("seed", ptr(int64(0)), "v")}, container("app", ptr(int64(7)), "v")),
				Volume: "v"}},
		{name: "two users: unchanged",
			req: Request{Pod: pod(nil, nil, container("a", ptr(int64(1000)), "v"), container("b", ptr(int64(2000)), "v")), Volume: "v"}},
		{name: "one user without a uid in the spec: unchanged",
			req: Request{Pod: pod(nil, nil, container("a", ptr(int64(1000)), "v"), container("b", nil, "v")), Volume: "v"}},
		{name: "containers not mounting the volume do not count",
			req:  Request{Pod: pod(nil, nil, container("a", ptr(int64(1000)), "v"), container("b", ptr(int64(0)), "other")), Volume: "v"},
			want: []string{"--uid=1000"}},
		{name: "nobody mounts it: unchanged",
			req: Request{Pod: pod(ptr(int64(1000)), nil, container("a", nil, "other")), Volume: "v"}},
		{name: "the volume's own options win, one by one",
			flags: []string{"--gid=3", "--file-mode=600", "--uid=4", "--implicit-dirs"},
			req:   Request{MountGroup: "50000", Pod: pod(ptr(int64(1000)), nil, container("app", nil, "v")), Volume: "v"},
			want:  []string{"--dir-mode=775"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Decide(tt.flags, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.Flags, tt.want) {
				t.Fatalf("flags %q, want %q", d.Flags, tt.want)
			}
			if (len(d.Flags) > 0) != (d.Reason != "") {
				t.Fatalf("reason %q for flags %q", d.Reason, d.Flags)
			}
		})
	}
}

func TestDecideRefusesABadGroup(t *testing.T) {
	for _, g := range []string{"abc", "-1", "4294967296", "1.5"} {
		if _, err := Decide(nil, Request{MountGroup: g}); err == nil || !strings.Contains(err.Error(), g) {
			t.Errorf("volume_mount_group %q: err %v, want one naming it", g, err)
		}
	}
}

func TestOwned(t *testing.T) {
	for f, want := range map[string]bool{"--uid=1": true, "--gid": true, "--file-mode=644": true, "--dir-mode=7": true,
		"--uidx=1": false, "--implicit-dirs": false, "--machine-type=n2": false} {
		if Owned(f) != want {
			t.Errorf("Owned(%q) = %v", f, !want)
		}
	}
}
