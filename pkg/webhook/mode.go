package webhook

import (
	"fmt"

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

// nativeSupported tells whether every node the pod can land on (only nodeName when set) and
// the API server run at least nativeSidecarMinVersion. reason explains a "no"; err is set
// when the versions could not be read at all.
func nativeSupported(cv ClusterVersions, nodeName string) (ok bool, reason string, err error) {
	server, err := cv.ServerVersion()
	if err != nil {
		return false, "", fmt.Errorf("API server version: %w", err)
	}
	if !supportsNative(server) {
		return false, fmt.Sprintf("the API server is %s, older than %s", server, nativeSidecarMinVersion), nil
	}
	kubelet, err := cv.MinKubeletVersion(nodeName)
	if err != nil {
		return false, "", fmt.Errorf("kubelet versions: %w", err)
	}
	if !supportsNative(kubelet) {
		where := "a node that the pod may run on"
		if nodeName != "" {
			where = "node " + nodeName
		}
		return false, fmt.Sprintf("%s runs kubelet %s, older than %s", where, kubelet, nativeSidecarMinVersion), nil
	}
	return true, "", nil
}

// chooseMode returns the sidecar mode for a pod and warnings for the user. A forced mode is
// always obeyed (the user may know better, for example a node pool about to be upgraded),
// with a warning when the cluster seems not to support it. Without a forced mode, native is
// chosen only when it is known to work; if the versions cannot be read the legacy mode,
// which works everywhere, is the fallback.
func chooseMode(cv ClusterVersions, nodeName, forced string) (string, []string) {
	if forced == contract.ModeLegacy {
		return contract.ModeLegacy, nil
	}
	ok, reason, err := nativeSupported(cv, nodeName)
	if forced == contract.ModeNative {
		switch {
		case err != nil:
			return contract.ModeNative, []string{fmt.Sprintf(
				"%s: %s is forced although the cluster versions could not be checked (%v)",
				contract.AnnotationSidecarMode, contract.ModeNative, err)}
		case !ok:
			return contract.ModeNative, []string{fmt.Sprintf(
				"%s: %s is forced although %s: the sidecar may not start as a native sidecar",
				contract.AnnotationSidecarMode, contract.ModeNative, reason)}
		}
		return contract.ModeNative, nil
	}
	if err != nil {
		return contract.ModeLegacy, []string{fmt.Sprintf(
			"the gcsfuse sidecar is injected as a regular (legacy) container because the cluster versions could not be checked: %v", err)}
	}
	if ok {
		return contract.ModeNative, nil
	}
	return contract.ModeLegacy, nil
}
