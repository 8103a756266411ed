package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// nativeSidecarMinVersion is the first release where native sidecars (the SidecarContainers
// feature) are on by default, in both the API server and the kubelet.
var nativeSidecarMinVersion = version.MajorMinor(1, 29)

// supportsNative compares major.minor only, so that "v1.29.0-rc.1" or "v1.29.3-gke.100"
// count as 1.29 (a plain semver comparison would put a 1.29 pre-release below 1.29.0).
func supportsNative(v *version.Version) bool {
	return version.MajorMinor(v.Major(), v.Minor()).AtLeast(nativeSidecarMinVersion)
}

// nativeSupported tells whether every node the pod can land on (its spec.nodeName's when
// set, else those its nodeSelector and node affinity admit: ClusterVersions) and the API
// server run at least nativeSidecarMinVersion. reason explains a "no"; err is set when the
// versions could not be read at all.
func nativeSupported(cv ClusterVersions, pod *corev1.Pod) (ok bool, reason string, err error) {
	server, err := cv.ServerVersion()
	if err != nil {
		return false, "", fmt.Errorf("API server version: %w", err)
	}
	if !supportsNative(server) {
		return false, fmt.Sprintf("the API server is %s, older than %s", server, nativeSidecarMinVersion), nil
	}
	kubelet, where, err := cv.MinKubeletVersion(pod)
	if err != nil {
		return false, "", fmt.Errorf("kubelet versions: %w", err)
	}
	if !supportsNative(kubelet) {
		return false, fmt.Sprintf("%s runs kubelet %s, older than %s", where, kubelet, nativeSidecarMinVersion), nil
	}
	return true, "", nil
}

// modeChoice is the sidecar mode chosen for a pod, and why.
type modeChoice struct {
	mode string
	// forced is set when the contract.AnnotationSidecarMode annotation chose the mode.
	forced bool
	// legacyReason says, for a legacy mode chosen automatically, what ruled native out.
	legacyReason string
	// versionsUnknown is set when that reason is a failure to read the cluster versions,
	// which may pass.
	versionsUnknown bool
	// warnings are for the user.
	warnings []string
}

// chooseMode returns the sidecar mode for a pod. A forced mode is always obeyed (the user
// may know better, for example a node pool about to be upgraded), with a warning when the
// cluster seems not to support it. Without a forced mode, native is chosen only when it is
// known to work; if the versions cannot be read the legacy mode, which works everywhere
// (except for init containers that read the bucket), is the fallback.
func chooseMode(cv ClusterVersions, pod *corev1.Pod, forced string) modeChoice {
	if forced == contract.ModeLegacy {
		return modeChoice{mode: contract.ModeLegacy, forced: true}
	}
	ok, reason, err := nativeSupported(cv, pod)
	if forced == contract.ModeNative {
		c := modeChoice{mode: contract.ModeNative, forced: true}
		switch {
		case err != nil:
			c.warnings = []string{fmt.Sprintf(
				"%s: %s is forced although the cluster versions could not be checked (%v)",
				contract.AnnotationSidecarMode, contract.ModeNative, err)}
		case !ok:
			c.warnings = []string{fmt.Sprintf(
				"%s: %s is forced although %s: the sidecar may not start as a native sidecar",
				contract.AnnotationSidecarMode, contract.ModeNative, reason)}
		}
		return c
	}
	if err != nil {
		why := fmt.Sprintf("the cluster versions could not be checked: %v", err)
		return modeChoice{mode: contract.ModeLegacy, legacyReason: why, versionsUnknown: true, warnings: []string{
			"the gcsfuse sidecar is injected as a regular (legacy) container because " + why}}
	}
	if ok {
		return modeChoice{mode: contract.ModeNative}
	}
	return modeChoice{mode: contract.ModeLegacy, legacyReason: reason}
}
