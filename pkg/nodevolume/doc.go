// Package nodevolume is what the Node service (pkg/csidriver) and its two mounters
// (pkg/sidecarmounter, pkg/sharedmounter) share: a validated publish (Request), the seam
// between them (Mounter), the one store of what the node knows of its targets (Store), and
// the effects both mounters use: the volume's credential files and CA bundle (Files), a
// target's unmount, the kernel read-ahead, Events on pods.
//
// The service validates each call, holds its target's lock, answers repeated calls from
// the store and chooses the mounter; a mounter mounts, offers and unmounts. Neither knows
// the other's mode.
package nodevolume
