package podfiles

import "path/filepath"

// Layout inside the gcsfuse-tmp emptyDir (contract.TmpVolumeName). These names are on disk
// between a node plugin and a sidecar that may be of different releases: never rename one.
//
//	handoff/<volume>.sock            hand-off socket (node plugin listens, sidecar connects)
//	exit                             exit file (node plugin writes)
//	terminating                      terminating file (node plugin writes)
//	init-done                        init-done file (node plugin writes)
//	metrics.sock                     metrics socket (sidecar listens, node plugin connects)
//	credentials/<volume>/credentials.json  gcsfuse's --key-file (node plugin writes)
//	credentials/<volume>/token       the pod's token, for federation (node plugin writes)
//	credentials/<volume>/ca.pem      the driver's extra CA bundle (node plugin writes)
//	volumes/<volume>/taken           the sidecar took the volume (sidecar writes)
//	volumes/<volume>/ca-certificates.crt  gcsfuse's SSL_CERT_FILE (sidecar writes)
//	volumes/<volume>/tmp             gcsfuse's temp dir without a buffer volume (sidecar)
//	volumes/<volume>/credential-configmap.json  gcsfuse's --key-file from the pod's credential ConfigMap (sidecar writes)
const (
	// HandoffDir holds one listening socket per volume, HandoffSocketName(volume), created
	// by the node plugin and connected to by the sidecar.
	HandoffDir = "handoff"
	// ExitFile, written by the node plugin, tells a sidecar that the workload is done.
	ExitFile = "exit"
	// TerminatingFile, written by the node plugin when it sees the pod being deleted, holds
	// JSON {"graceSeconds": N, "deletionTimestamp": ...} (Terminating): N is the grace the
	// kubelet applies (metadata.deletionGracePeriodSeconds, which kubectl delete
	// --grace-period sets), and a draining sidecar keeps serving until N seconds after its
	// SIGTERM, never less.
	TerminatingFile = "terminating"
	// InitDoneFile, written by the node plugin once every regular init container of a
	// native-sidecar pod has terminated successfully (from the API), tells the sidecar that
	// a later SIGTERM comes after the regular containers exited: exit at once, no drain.
	InitDoneFile = "init-done"
	// MounterStoppingFile, written by the node's shared mounter in its own directory when it
	// begins to stop (SIGTERM: its pod deleted or replaced) and removed when one starts,
	// holds the time its grace ends (RFC 3339). While it is there the node plugin refuses
	// shared publishes (Unavailable; the kubelet retries them against the next mounter)
	// instead of handing a mount to a process about to end.
	MounterStoppingFile = "mounter-stopping"
	// MounterRunningFile, in the node's shared mounter's directory, is flock'ed shared by
	// every running mounter for as long as its process lives (the kernel drops the lock
	// with it, however it ends). The node plugin, stopping with no shared mount left,
	// takes it exclusively to tell that no mounter runs, and removes the shared directory
	// under it (uninstall leaves nothing on the host).
	MounterRunningFile = "mounter-running"
)

const (
	// handoffSocketSuffix ends every hand-off socket name.
	handoffSocketSuffix = ".sock"
	// sidecarVolumesDir holds the sidecar's per-volume directories: the taken record, the
	// combined CA bundle and gcsfuse's temp dir (not the kubelet's pods/<uid>/volumes).
	sidecarVolumesDir = "volumes"
	// takenFile, "volumes/<volume>/<takenFile>", is the sidecar's record that it took
	// the volume's descriptor (Taken).
	takenFile = "taken"
	// volumeTempDir, "volumes/<volume>/<volumeTempDir>", is gcsfuse's TMPDIR when the
	// pod has no buffer volume.
	volumeTempDir = "tmp"
	// combinedCAFile, "volumes/<volume>/<combinedCAFile>", is the system's roots
	// followed by the driver's extra CA bundle: what gcsfuse's SSL_CERT_FILE names.
	combinedCAFile = "ca-certificates.crt"
	// credentialConfigMapFile, "volumes/<volume>/<credentialConfigMapFile>", is the pod's
	// credential configuration (contract.EnvCredentialConfig) that gcsfuse reads with
	// --key-file for a volume without an identity of its own.
	credentialConfigMapFile = "credential-configmap.json"
	// metricsSocket is the sidecar's unix socket serving, over HTTP GET /metrics, the
	// metrics of its gcsfuse processes (pkg/gcsfusemetrics), one series set per volume. The
	// node plugin reads it; no network port of the pod is involved.
	metricsSocket = "metrics.sock"
	// credentialsDir, "<credentialsDir>/<volume>/", holds the files the node plugin writes
	// for one volume (directories 0700 and files 0600, owned by the sidecar's user):
	// credentialsConfigFile, which gcsfuse reads with --key-file, for Workload Identity
	// Federation credentialsTokenFile, the pod's service account token it points to, and
	// caBundleFile, the driver's extra CA bundle (PEM) when it has one.
	credentialsDir        = "credentials"
	credentialsConfigFile = "credentials.json"
	credentialsTokenFile  = "token"
	caBundleFile          = "ca.pem"
)

// Paths are the paths of the files in a gcsfuse-tmp emptyDir mounted at a directory, for
// what goes by path: the sidecar sees the emptyDir at contract.TmpMountPath (its --tmp-dir)
// and hands gcsfuse paths (--key-file, TMPDIR, SSL_CERT_FILE); the node plugin writes paths
// the sidecar will read into what it writes; tests and tools look at the host's side
// (At(TmpDirPath(...))). Code that opens, writes or dials the files does so on a pinned
// descriptor of the directory with the functions of this package, never through these.
type Paths struct{ dir string }

// At is the layout of the gcsfuse-tmp emptyDir mounted at dir.
func At(dir string) Paths { return Paths{dir: dir} }

// HandoffDir is the directory of the hand-off sockets.
func (p Paths) HandoffDir() string { return filepath.Join(p.dir, HandoffDir) }

// HandoffSocket is the hand-off socket of volume.
func (p Paths) HandoffSocket(volume string) string {
	return filepath.Join(p.dir, HandoffDir, HandoffSocketName(volume))
}

// ExitFile is the exit file.
func (p Paths) ExitFile() string { return filepath.Join(p.dir, ExitFile) }

// TerminatingFile is the terminating file.
func (p Paths) TerminatingFile() string { return filepath.Join(p.dir, TerminatingFile) }

// InitDoneFile is the init-done file.
func (p Paths) InitDoneFile() string { return filepath.Join(p.dir, InitDoneFile) }

// MetricsSocket is the sidecar's metrics socket.
func (p Paths) MetricsSocket() string { return filepath.Join(p.dir, metricsSocket) }

// CredentialsDir is volume's credentials directory (its parent holds every volume's).
func (p Paths) CredentialsDir(volume string) string {
	return filepath.Join(p.dir, credentialsDir, volume)
}

// CredentialsConfigFile is the credentials file of volume that gcsfuse reads with
// --key-file (an external_account configuration or a service account key).
func (p Paths) CredentialsConfigFile(volume string) string {
	return filepath.Join(p.CredentialsDir(volume), credentialsConfigFile)
}

// CredentialsTokenFile is the service account token of volume (Workload Identity
// Federation), which its external_account configuration names.
func (p Paths) CredentialsTokenFile(volume string) string {
	return filepath.Join(p.CredentialsDir(volume), credentialsTokenFile)
}

// CABundleFile is the driver's extra CA bundle for volume, as the node plugin wrote it.
func (p Paths) CABundleFile(volume string) string {
	return filepath.Join(p.CredentialsDir(volume), caBundleFile)
}

// VolumeDir is the sidecar's directory of volume (its parent holds every volume's).
func (p Paths) VolumeDir(volume string) string {
	return filepath.Join(p.dir, sidecarVolumesDir, volume)
}

// TakenFile is the sidecar's taken record of volume.
func (p Paths) TakenFile(volume string) string {
	return filepath.Join(p.VolumeDir(volume), takenFile)
}

// CredentialConfigMapFile is the pod's credential configuration the sidecar gives volume's
// gcsfuse (--key-file).
func (p Paths) CredentialConfigMapFile(volume string) string {
	return filepath.Join(p.VolumeDir(volume), credentialConfigMapFile)
}

// CombinedCAFile is the CA bundle the sidecar gives volume's gcsfuse (SSL_CERT_FILE).
func (p Paths) CombinedCAFile(volume string) string {
	return filepath.Join(p.VolumeDir(volume), combinedCAFile)
}

// VolumeTempDir is gcsfuse's temp dir for volume when the pod has no buffer volume.
func (p Paths) VolumeTempDir(volume string) string {
	return filepath.Join(p.VolumeDir(volume), volumeTempDir)
}
