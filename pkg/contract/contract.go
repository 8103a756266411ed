// Package contract holds the names that the webhook, the node plugin and the sidecar must agree
// on: annotations, container and volume names, mount paths and environment variables. They
// live in one place so a rename cannot leave one component behind. The layout inside the
// TmpVolumeName emptyDir (hand-off sockets, exit and other files, credentials) is
// pkg/podfiles's.
package contract

import (
	"fmt"
	"strings"
)

// DriverName is the CSI driver name registered with the kubelet and used in CSIDriver
// objects by default. The node plugin and the webhook take the name they are installed
// under as a flag (--driver-name), one of DriverNames.
const DriverName = "gcsfuse.csi.storage"

// IncumbentDriverName is the GKE GCS FUSE CSI driver's name. A cluster that does not run
// that driver may install this one under its name (the chart's driverName), so that
// PersistentVolumes and inline volumes written for it need no edit (docs/migration.md).
// Only the driver name changes: the annotation prefix, the token audience and every other
// name here stay this project's.
const IncumbentDriverName = "gcsfuse.csi.storage.gke.io"

// IncumbentSidecarContainerName is the GKE driver's sidecar container. It is never a
// workload container of ours: it is either the GKE add-on's own sidecar (the add-on still
// installed during a migration) or, on a cluster without the add-on, a placeholder that lends
// our sidecar its image.
const IncumbentSidecarContainerName = "gke-gcsfuse-sidecar"

// DriverNames are the names the driver may be installed under.
var DriverNames = []string{DriverName, IncumbentDriverName}

// ValidateDriverName refuses a driver name other than DriverNames: the name is also part of
// host paths (the kubelet's plugin directories), so it is never free text.
func ValidateDriverName(name string) error {
	for _, n := range DriverNames {
		if name == n {
			return nil
		}
	}
	return fmt.Errorf("driver name %q: must be one of %s", name, strings.Join(DriverNames, ", "))
}

// MaxVolumeNameLen bounds a volume name: the name is part of the hand-off socket's path, and
// a unix socket's path, even reached through a short /proc/self/fd/N/ prefix, must fit the
// kernel's 108 bytes.
const MaxVolumeNameLen = 63

// ValidVolumeName reports whether name can name a volume here: a pod's volume name (a
// DNS-1123 label) or a PersistentVolume's name (a DNS-1123 subdomain: labels joined by
// dots), which the kubelet uses as the volume's directory, of at most MaxVolumeNameLen
// bytes. Each such name is also safe as a single path element (never "." or "..", no
// slash). The node plugin refuses a volume whose name is not one, and the sidecar refuses to
// serve it.
func ValidVolumeName(name string) bool {
	if len(name) == 0 || len(name) > MaxVolumeNameLen {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if !dnsLabel(label) {
			return false
		}
	}
	return true
}

// dnsLabel reports whether s is a DNS-1123 label: lower-case alphanumerics and '-', starting
// and ending with an alphanumeric.
func dnsLabel(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// AnnotationPrefix is the one prefix for every annotation this project reads.
const AnnotationPrefix = "gcsfuse.csi.storage/"

// Pod annotations.
const (
	// AnnotationInject opts a pod in to sidecar injection ("true" or "false").
	AnnotationInject = AnnotationPrefix + "volumes"
	// AnnotationSidecarMode forces "legacy" (regular container) or "native" injection.
	AnnotationSidecarMode = AnnotationPrefix + "sidecar-mode"
	// AnnotationIgnoreContainers lists, comma separated, containers that are not workload
	// (for example a legacy istio-proxy): the sidecar does not wait for them.
	AnnotationIgnoreContainers = AnnotationPrefix + "ignore-containers"
	// Resource annotations for the sidecar; "0" means unlimited.
	AnnotationCPURequest              = AnnotationPrefix + "cpu-request"
	AnnotationCPULimit                = AnnotationPrefix + "cpu-limit"
	AnnotationMemoryRequest           = AnnotationPrefix + "memory-request"
	AnnotationMemoryLimit             = AnnotationPrefix + "memory-limit"
	AnnotationEphemeralStorageRequest = AnnotationPrefix + "ephemeral-storage-request"
	AnnotationEphemeralStorageLimit   = AnnotationPrefix + "ephemeral-storage-limit"
	// AnnotationInjected is set by the webhook on the pods it injected, to ModeNative or
	// ModeLegacy. It makes re-invocation a no-op and lets the ValidatingAdmissionPolicy find
	// the native pods whose sidecar another webhook may have altered.
	AnnotationInjected = AnnotationPrefix + "injected"
	// AnnotationCredentialConfigMap names a ConfigMap of the pod's namespace holding an
	// external_account credential configuration (the GKE driver's
	// gke-gcsfuse/workload-identity-credential-configmap): the webhook checks it
	// (credentials.ParseCredentialConfigMap) and gives the sidecar what it checked and the
	// pod's own service account token, and every gcsfuse of the pod without an identity of
	// its own reads with them.
	AnnotationCredentialConfigMap = AnnotationPrefix + "workload-identity-credential-configmap"
)

// The credential ConfigMap in an injected pod (AnnotationCredentialConfigMap): the pod's
// projected service account token, in CredentialTokenVolumeName, mounted in the sidecar at
// the directory the configuration reads it from; the configuration itself, as the webhook
// checked it, in the sidecar's EnvCredentialConfig (the pod's spec freezes it: a later edit
// of the ConfigMap changes nothing), and the ConfigMap's name, for messages, in
// EnvCredentialConfigMap.
const (
	CredentialTokenVolumeName = "gcsfuse-wif-token"
	EnvCredentialConfig       = "GCSFUSE_CREDENTIAL_CONFIG"
	EnvCredentialConfigMap    = "GCSFUSE_CREDENTIAL_CONFIGMAP"
)

// Sidecar modes, the values of AnnotationSidecarMode and EnvSidecarMode.
const (
	ModeNative = "native"
	ModeLegacy = "legacy"
	// ModeShared is the node's shared mounter (contract.SharedMounterContainerName): the
	// sidecar binary run once per node for the volumes with AttrMountMode shared. No exit
	// file reaches it; it ends on SIGTERM once every shared mount is unmounted.
	ModeShared = "shared"
)

// SidecarContainerName is the name of the injected sidecar container.
const SidecarContainerName = "gcsfuse-sidecar"

// SidecarUID and SidecarGID are the unprivileged identity the sidecar runs as.
const (
	SidecarUID = 65534
	SidecarGID = 65534
)

// Volumes the webhook injects and the paths where the sidecar mounts them.
const (
	// TmpVolumeName is the emptyDir shared by the node plugin and the sidecar: it holds the
	// hand-off sockets, the exit file and gcsfuse's temp dirs (its layout: pkg/podfiles).
	TmpVolumeName    = "gcsfuse-tmp"
	TmpMountPath     = "/gcsfuse-tmp"
	BufferVolumeName = "gcsfuse-buffer"
	BufferMountPath  = "/gcsfuse-buffer"
	CacheVolumeName  = "gcsfuse-cache"
	CacheMountPath   = "/gcsfuse-cache"
)

// Environment variables the webhook sets on the sidecar.
const (
	// EnvGraceSeconds is the pod's terminationGracePeriodSeconds.
	EnvGraceSeconds = "GCSFUSE_GRACE_SECONDS"
	// EnvSidecarMode is ModeNative or ModeLegacy.
	EnvSidecarMode = "GCSFUSE_SIDECAR_MODE"
	// EnvInitContainers lists, comma separated, the regular (run-to-completion) init
	// containers that start after a native sidecar and mount a gcsfuse volume. The kubelet
	// SIGTERMs such a container and the native sidecar together when the pod is deleted
	// during its init phase, so a native sidecar with this set drains on SIGTERM (like a
	// legacy one) unless the init-done file (pkg/podfiles) says the init phase is over.
	// Empty: SIGTERM means every container that uses the mounts has exited.
	EnvInitContainers = "GCSFUSE_INIT_CONTAINERS"
	// EnvSidecarUsers lists, comma separated, the user's own native sidecars (init
	// containers with restartPolicy: Always, not ours) that start after a native gcsfuse
	// sidecar and mount a gcsfuse volume (inline or through a claim). The kubelet stops
	// them before ours, in reverse order, after the regular containers: the workload is done
	// only once they have exited too (a log shipper flushing its last object on SIGTERM).
	EnvSidecarUsers = "GCSFUSE_SIDECAR_USERS"
	// EnvPodNamespace and EnvPodName name the sidecar's pod (downward API), so that every
	// line it logs carries the pod.
	EnvPodNamespace = "GCSFUSE_POD_NAMESPACE"
	EnvPodName      = "GCSFUSE_POD_NAME"
)

// PreStopWaitFlag is the sidecar flag of its preStop hook (a legacy sidecar's): wait for
// the exit file, at most the pod's grace, then return. The kubelet runs the app's preStop
// and the sidecar's side by side and sends SIGTERM only after each hook returns, adding at
// least two seconds of grace after a hook: a sidecar without a hook would be stopped while
// an app with one may still write.
const PreStopWaitFlag = "-wait-exit"

// SidecarBinary is the sidecar's path inside its image.
const SidecarBinary = "/gcsfuse-sidecar"

// DefaultGraceSeconds is Kubernetes' default terminationGracePeriodSeconds.
const DefaultGraceSeconds = 30

// Volume attributes and CSI context keys.
const (
	AttrBucketName   = "bucketName"
	AttrMountOptions = "mountOptions"
	// AttrFileCacheCapacity sizes gcsfuse's file cache ("10Gi", "-1" = unlimited); its presence makes the webhook
	// inject the CacheVolumeName emptyDir.
	AttrFileCacheCapacity = "fileCacheCapacity"
	// AttrWorkloadIdentityProvider is the Workload Identity Federation provider (the STS
	// audience, "//iam.googleapis.com/projects/N/locations/global/workloadIdentityPools/P/providers/R")
	// for this volume, overriding the node plugin's --wif-provider; pkg/credentials reads it.
	AttrWorkloadIdentityProvider = "workloadIdentityProvider"
	// AttrServiceAccount is the Google service account that the federated identity
	// impersonates for this volume ("" with the node plugin's default: none).
	AttrServiceAccount = "serviceAccount"
	// AttrTokenURL is the STS token exchange URL for this volume: one of the node plugin's
	// --wif-token-url and --wif-allowed-token-urls.
	AttrTokenURL = "tokenURL"
	// AttrGKEIdentityProvider and AttrGKEIdentityPool are the GKE driver's names for a
	// volume's federation provider: a GKE cluster's identity provider URL
	// ("https://container.googleapis.com/v1/projects/P/locations/L/clusters/C", with the
	// pool "P.svc.id.goog" unless AttrGKEIdentityPool names another) or a Workload Identity
	// pool provider's name. pkg/credentials reads them as the AttrWorkloadIdentityProvider
	// they stand for (docs/migration.md).
	AttrGKEIdentityProvider = "identityProvider"
	AttrGKEIdentityPool     = "identityPool"
	// AttrMountMode says where a volume's gcsfuse runs: MountModeSidecar (the default: in the
	// pod's own sidecar) or MountModeShared (in the node's mounter, one gcsfuse per sharing
	// key, bind-mounted into every pod that uses it; a pod whose driver volumes are all
	// shared gets no sidecar).
	AttrMountMode = "mountMode"
	// Keys the kubelet adds when the CSIDriver has podInfoOnMount: true.
	CtxPodName      = "csi.storage.k8s.io/pod.name"
	CtxPodNamespace = "csi.storage.k8s.io/pod.namespace"
	CtxPodUID       = "csi.storage.k8s.io/pod.uid"
	CtxSAName       = "csi.storage.k8s.io/serviceAccount.name"
	CtxEphemeral    = "csi.storage.k8s.io/ephemeral"
	CtxSATokens     = "csi.storage.k8s.io/serviceAccount.tokens"
)

// Values of AttrMountMode.
const (
	MountModeSidecar = "sidecar"
	MountModeShared  = "shared"
)

// SharedMounterContainerName is the node mounter's container (the sidecar binary with
// --shared): it runs the gcsfuse of every shared volume of its node.
const SharedMounterContainerName = "gcsfuse-mounter"

// SecretKeyServiceAccount is the key, in the Secret named by a volume's
// nodePublishSecretRef, that holds a Google service account key (JSON).
const SecretKeyServiceAccount = "key.json"

// TokenAudience is the audience of the service account token the kubelet requests for the
// node plugin (the CSIDriver's tokenRequests): a Workload Identity Federation provider must
// accept it.
const TokenAudience = "gcsfuse.csi.storage"

// Event reasons the node plugin records on pods, one spelling everywhere, so users can
// filter with kubectl get events --field-selector reason=...
const (
	EventGcsfuseStarted       = "GcsfuseStarted"       // gcsfuse answered the kernel
	EventSharedMountJoined    = "SharedMountJoined"    // a shared volume bound to the node's running gcsfuse of its key
	EventGcsfuseFailed        = "GcsfuseFailed"        // gcsfuse could not start (the message says why)
	EventGcsfuseExited        = "GcsfuseExited"        // gcsfuse died after having started
	EventSidecarExitRequested = "SidecarExitRequested" // the workload is done; the sidecar was told to exit
	EventSidecarExitFailed    = "SidecarExitFailed"    // the exit file could not be written
	EventSidecarFailed        = "SidecarFailed"        // the sidecar exited non-zero
	EventHandoffRefused       = "HandoffRefused"       // the sidecar refused an offered volume (the message says why)
	EventSidecarDraining      = "SidecarDraining"      // the sidecar got SIGTERM while containers may still use the mounts
	EventReadAheadFailed      = "ReadAheadFailed"      // the mount option read_ahead_kb could not be applied
	EventVolumeRemounted      = "VolumeRemounted"      // the sidecar died without a word; its volume was mounted again for its restart
	EventVolumeLost           = "VolumeLost"           // the sidecar died without a word and is not restarted; the volume answers I/O errors
)
