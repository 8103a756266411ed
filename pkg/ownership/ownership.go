// Package ownership decides who owns the files of a gcsfuse mount, so that a pod running as
// a non-root user can write to its bucket without any mount option.
//
// gcsfuse reports one owner and one mode for every file and directory (its --uid, --gid,
// --file-mode and --dir-mode flags; by default the sidecar's own uid 65534 and 0644/0755),
// and the node plugin mounts with default_permissions, so the kernel checks those. A pod
// whose app runs as uid 50000 would get "Permission denied" on its first write. The rules,
// each applying only to the flags the volume does not set itself (the volume's own uid,
// gid, file-mode and dir-mode always win):
//
//   - fsGroup: the kubelet passes the pod's fsGroup as volume_mount_group (the driver
//     advertises VOLUME_MOUNT_GROUP). The group becomes fsGroup, files 0664 and
//     directories 0775, so every container of the pod (all carry fsGroup among their
//     groups) can write; the GKE driver does the same.
//   - one non-root user: when every container that mounts the volume runs as the same
//     non-root uid (its runAsUser, else the pod's), that uid owns the files, so
//     runAsUser: 1000 alone works, with or without fsGroup.
//   - anything else (root, no runAsUser in the spec, several users): unchanged.
//
// The rules are pure functions of the pod object and the request, for table tests; the
// node plugin applies them.
package ownership

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Group-writable modes given with fsGroup: the incumbent's, so manifests behave the same.
const (
	GroupFileMode = "664"
	GroupDirMode  = "775"
)

// The gcsfuse flags this package sets.
const (
	flagUID      = "--uid"
	flagGID      = "--gid"
	flagFileMode = "--file-mode"
	flagDirMode  = "--dir-mode"
)

// Owned reports whether flag is one of the ownership flags (with or without a value), so
// that a republished volume, whose pod the node plugin may only know by then, is compared
// without them.
func Owned(flag string) bool {
	name, _, _ := strings.Cut(flag, "=")
	switch name {
	case flagUID, flagGID, flagFileMode, flagDirMode:
		return true
	}
	return false
}

// Request is what a mount's ownership depends on.
type Request struct {
	// MountGroup is the CSI volume_mount_group: the pod's fsGroup, "" when it has none.
	MountGroup string
	// Pod is the pod being mounted for, nil when the node plugin does not know it (the
	// fsGroup rule still applies).
	Pod *corev1.Pod
	// Volume is the pod volume's name.
	Volume string
	// Skip names a container that is not the pod's (the gcsfuse sidecar): it does not count
	// as a user of the volume.
	Skip string
}

// Decision is the outcome of Decide: the flags to add and why, for the log.
type Decision struct {
	Flags  []string
	Reason string
}

// Decide returns the ownership flags to add to flags (the volume's own) for r. A
// volume_mount_group that is not a group ID is an error: the kubelet would never send one,
// so it is a caller's bug to report, never to guess around.
func Decide(flags []string, r Request) (Decision, error) {
	var d Decision
	var reasons []string
	if r.MountGroup != "" {
		gid, err := strconv.ParseUint(r.MountGroup, 10, 31)
		if err != nil {
			return Decision{}, fmt.Errorf("volume_mount_group %q is not a group ID", r.MountGroup)
		}
		d.add(flags, flagGID, strconv.FormatUint(gid, 10))
		d.add(flags, flagFileMode, GroupFileMode)
		d.add(flags, flagDirMode, GroupDirMode)
		reasons = append(reasons, "fsGroup "+r.MountGroup)
	}
	if uid, who, ok := SoleUser(r.Pod, r.Volume, r.Skip); ok {
		d.add(flags, flagUID, strconv.FormatInt(uid, 10))
		reasons = append(reasons, fmt.Sprintf("every container mounting it (%s) runs as uid %d", strings.Join(who, ","), uid))
	}
	d.Reason = strings.Join(reasons, "; ")
	return d, nil
}

// add appends name=value unless flags already set name.
func (d *Decision) add(flags []string, name, value string) {
	if slices.ContainsFunc(flags, func(f string) bool { n, _, _ := strings.Cut(f, "="); return n == name }) {
		return
	}
	d.Flags = append(d.Flags, name+"="+value)
}

// SoleUser reports the uid every container of pod that mounts volume runs as (init and
// regular containers alike, except skip), with their names, when there is at least one
// such container and all of them run as the same non-root uid set in the spec. A
// container whose uid the spec does not give (the image's USER) makes it unknown: the
// node plugin cannot read images.
func SoleUser(pod *corev1.Pod, volume, skip string) (int64, []string, bool) {
	if pod == nil {
		return 0, nil, false
	}
	var uid int64 = -1
	var who []string
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			if c.Name == skip || !mounts(c, volume) {
				continue
			}
			u := runAsUser(pod, c)
			if u == nil || *u == 0 || (uid >= 0 && *u != uid) {
				return 0, nil, false
			}
			uid = *u
			who = append(who, c.Name)
		}
	}
	return uid, who, uid > 0
}

func mounts(c *corev1.Container, volume string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
}

// runAsUser is the container's uid as the spec gives it: its own, else the pod's.
func runAsUser(pod *corev1.Pod, c *corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsUser
	}
	return nil
}
