package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/driverpod"
)

// A pod that mounts a volume of this driver without the sidecar can never work: the node
// plugin mounts the bucket, but nothing serves the mount. So the webhook injects the sidecar
// into every pod that uses the driver, with or without the opt-in annotation: an inline CSI
// volume of the driver (seen in the pod itself), a persistentVolumeClaim bound to one of
// its PersistentVolumes (two GETs per claim at admission), a claim not bound yet that one
// of its PersistentVolumes names in its claimRef (prebound.go), a claim not bound yet whose
// StorageClass the driver provisions, or a generic ephemeral volume whose claim template
// names such a class. The annotation still opts out ("false") and still chooses the mode.
//
// Unbound claims are the common case with dynamic provisioning: a WaitForFirstConsumer
// claim binds only once its pod is scheduled, after admission; an Immediate one may not be
// provisioned yet; and a generic ephemeral volume has no claim at all at admission (the
// ephemeral controller makes <pod>-<volume> after the pod). Such a volume is the driver's
// when its StorageClass's provisioner is the driver name served, and its attributes are
// the class's (classparams: what the provisioner will put in the PersistentVolume, but the
// claim's own only-dir, which no admission decision reads). A PersistentVolume whose
// claimRef names the claim comes first, whatever the class: the PV controller binds the
// claim to it, not to a volume the class would provision. A class that provisions nothing
// (kubernetes.io/no-provisioner) or no class at all binds only volumes made beforehand,
// which admission cannot tell unless one names the claim: such a claim stays unresolved,
// as an unbound claim always was.
//
// A claim is a volume like any other once resolved: the claims are looked up once per
// admission, whatever the annotation says, and every decision that depends on which
// volumes are ours (where the native sidecar goes, which init containers it serves,
// whether a legacy pod would hang, whether gcsfuse needs a cache volume) reads that one
// driverVolumes map, less the volumes the node's shared mounter serves (shared.go).

// claimLookupTimeout bounds the claim, volume and StorageClass lookups of one admission,
// well inside the webhook's 10 s timeout.
const claimLookupTimeout = 3 * time.Second

// MaxLookups bounds the look-ups of one admission, distinct claims and StorageClasses
// together: a pod may name thousands of either, each a read of the API server, and one pod
// must not spend a replica's request budget alone. The volumes past it are not looked up,
// said by one warning: a pod of the driver among them gets no sidecar.
const MaxLookups = 128

// Annotations that make a StorageClass the cluster's default (the beta one is still
// honoured by Kubernetes' DefaultStorageClass admission plugin).
const (
	annotationDefaultClass     = "storageclass.kubernetes.io/is-default-class"
	annotationBetaDefaultClass = "storageclass.beta.kubernetes.io/is-default-class"
)

// noProvisioner is the provisioner of a StorageClass whose claims bind only to
// PersistentVolumes made beforehand (local volumes, or this driver's own made by hand).
const noProvisioner = "kubernetes.io/no-provisioner"

// ClaimedVolume is what a PersistentVolumeClaim resolves to.
type ClaimedVolume struct {
	// Bound is set when the claim names its PersistentVolume and that exists, or names no
	// volume yet but a PersistentVolume names it in its claimRef (pre-bound: the PV
	// controller binds the two after admission); then Driver and Attributes are that
	// volume's. It is false when the claim names no volume and none names it, or the
	// claim or the volume it names does not exist.
	Bound bool
	// Driver is the CSI driver of the bound PersistentVolume ("" for a volume that is not
	// CSI).
	Driver string
	// MountOptions are the PersistentVolume's spec.mountOptions (its class's mountOptions,
	// for one the driver provisioned): options given as the mountOptions attribute is, a
	// file cache among them (mountopts.WantsFileCache).
	MountOptions []string
	// Attributes are the PersistentVolume's spec.csi.volumeAttributes: they ask for a file
	// cache like an inline volume's.
	Attributes map[string]string
	// Pending is set for a claim that exists, names no volume yet and that no volume names:
	// it gets the volume its StorageClass (StorageClassName) provisions, or one made
	// beforehand.
	Pending bool
	// StorageClassName is a pending claim's spec.storageClassName: nil for the cluster's
	// default class (the DefaultStorageClass admission plugin normally fills it in, so nil
	// is rare), "" for no class (only a PersistentVolume made beforehand binds it).
	StorageClassName *string
	// MaybeStale is set on a pending claim that a volume pre-bound to it may yet be missing
	// from the cache for: the cache has not synced, or the claim is new
	// (livePreboundRecent). Only then is a live look-up (PreboundLive) worth its cost.
	MaybeStale bool
}

// ClassedVolume is what a StorageClass provisions for a claim.
type ClassedVolume struct {
	// Class is the StorageClass's name, "" when there is none: the claim asks for no class,
	// or for the default class and the cluster has none.
	Class string
	// Provisioner is the class's provisioner: a CSI driver name, or noProvisioner.
	Provisioner string
	// Parameters are the class's parameters, which the driver's provisioner reads with
	// classparams.Parse.
	Parameters map[string]string
	// MountOptions are the class's mountOptions, which its provisioner gives each
	// PersistentVolume as spec.mountOptions.
	MountOptions []string
}

// VolumeClaims finds the CSI volume behind a pod's PersistentVolumeClaim or generic
// ephemeral volume.
type VolumeClaims interface {
	// ClaimVolume resolves claim in namespace to its bound (or pre-bound) PersistentVolume,
	// or says that it is pending and of which StorageClass.
	ClaimVolume(ctx context.Context, namespace, claim string) (ClaimedVolume, error)
	// ClassVolume finds the StorageClass className names, as a claim's
	// spec.storageClassName does: nil for the cluster's default class (DefaultStorageClass;
	// none: a zero ClassedVolume), "" for no class (a zero ClassedVolume). A class that does
	// not exist is an error: whether the claim is the driver's cannot be told.
	ClassVolume(ctx context.Context, className *string) (ClassedVolume, error)
}

// livePrebound is a VolumeClaims whose pre-bound volumes come from a cache, and that can
// ask the API server instead (KubeVolumeClaims.PreboundLive).
type livePrebound interface {
	PreboundLive(ctx context.Context, namespace, claim string) (ClaimedVolume, error)
}

// KubeVolumeClaims is the VolumeClaims of a live cluster (RBAC: get on
// persistentvolumeclaims and persistentvolumes, list and watch on persistentvolumes for
// Prebound, get and list on storageclasses).
type KubeVolumeClaims struct {
	Client kubernetes.Interface
	// Prebound finds the PersistentVolumes whose claimRef names a claim that names no
	// volume yet. nil, or not synced yet: such a claim is pending, resolved through its
	// StorageClass alone.
	Prebound *PreboundVolumes
	// Live bounds the live lists of PreboundLive across admissions (nil: none). A list
	// that the limiter refuses is not made: the claim stays pending, as before the look-up.
	Live *rate.Limiter
	// now is time.Now (tests set it).
	now func() time.Time
}

// ClaimVolume implements VolumeClaims.
func (k KubeVolumeClaims) ClaimVolume(ctx context.Context, namespace, claim string) (ClaimedVolume, error) {
	return k.resolveClaim(ctx, namespace, claim, false)
}

// resolveClaim is ClaimVolume, with the volumes pre-bound to an unbound claim taken from a
// live list of them rather than from the cache when live is set (PreboundLive).
func (k KubeVolumeClaims) resolveClaim(ctx context.Context, namespace, claim string, live bool) (ClaimedVolume, error) {
	pvc, err := k.Client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ClaimedVolume{}, nil
	case err != nil:
		return ClaimedVolume{}, fmt.Errorf("claim %s/%s: %w", namespace, claim, err)
	case pvc.Spec.VolumeName == "":
		return k.unboundClaim(ctx, pvc, live)
	}
	pv, err := k.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ClaimedVolume{}, nil
	case err != nil:
		return ClaimedVolume{}, fmt.Errorf("volume %s of claim %s/%s: %w", pvc.Spec.VolumeName, namespace, claim, err)
	}
	return ClaimedVolumeOf(pv), nil
}

// unboundClaim resolves a claim that names no volume: to the volume pre-bound to it (from
// the cache, or listed live), else pending.
func (k KubeVolumeClaims) unboundClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim, live bool) (ClaimedVolume, error) {
	var pvs []*corev1.PersistentVolume
	var err error
	if live {
		if !k.liveWorthIt(pvc) {
			return ClaimedVolume{Pending: true, StorageClassName: pvc.Spec.StorageClassName}, nil
		}
		pvs, err = k.listPrebound(ctx, pvc)
	} else {
		pvs, err = k.Prebound.volumesOf(pvc)
	}
	switch {
	case err != nil:
		return ClaimedVolume{}, fmt.Errorf("the PersistentVolumes pre-bound to claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	case len(pvs) == 0:
		return ClaimedVolume{Pending: true, StorageClassName: pvc.Spec.StorageClassName, MaybeStale: !live && k.maybeStale(pvc)}, nil
	}
	cv, err := preboundVolume(pvs)
	if err != nil {
		return ClaimedVolume{}, fmt.Errorf("claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return cv, nil
}

// ClaimedVolumeOf is what a claim bound (or pre-bound) to pv resolves to.
func ClaimedVolumeOf(pv *corev1.PersistentVolume) ClaimedVolume {
	if pv.Spec.CSI == nil {
		return ClaimedVolume{Bound: true}
	}
	return ClaimedVolume{Bound: true, Driver: pv.Spec.CSI.Driver, Attributes: pv.Spec.CSI.VolumeAttributes, MountOptions: pv.Spec.MountOptions}
}

// withMountOptions is a volume's attributes as the webhook reads them: with the
// PersistentVolume's or class's mountOptions before those of the mountOptions attribute, as
// the node plugin reads the two (mountopts.FromAttributes). attrs itself is not changed.
func withMountOptions(attrs map[string]string, mountOptions []string) map[string]string {
	if len(mountOptions) == 0 {
		return attrs
	}
	out := maps.Clone(attrs)
	if out == nil {
		out = map[string]string{}
	}
	opts := strings.Join(mountOptions, ",")
	if v := out[contract.AttrMountOptions]; v != "" {
		opts += "," + v
	}
	out[contract.AttrMountOptions] = opts
	return out
}

// ClassVolume implements VolumeClaims: a GET of the class, or a list of the classes for
// the default one (from the API server's cache: a class made a moment ago may be missed,
// as the DefaultStorageClass plugin, reading an informer, may miss it too).
func (k KubeVolumeClaims) ClassVolume(ctx context.Context, className *string) (ClassedVolume, error) {
	if className == nil {
		list, err := k.Client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return ClassedVolume{}, fmt.Errorf("the default StorageClass: %w", err)
		}
		classes := make([]*storagev1.StorageClass, len(list.Items))
		for i := range list.Items {
			classes[i] = &list.Items[i]
		}
		return ClassedVolumeOf(DefaultStorageClass(classes)), nil
	}
	if *className == "" {
		return ClassedVolume{}, nil
	}
	sc, err := k.Client.StorageV1().StorageClasses().Get(ctx, *className, metav1.GetOptions{})
	if err != nil {
		return ClassedVolume{}, fmt.Errorf("StorageClass %s: %w", *className, err)
	}
	return ClassedVolumeOf(sc), nil
}

// ClassedVolumeOf is what a claim of the class sc (nil: none) resolves to.
func ClassedVolumeOf(sc *storagev1.StorageClass) ClassedVolume {
	if sc == nil {
		return ClassedVolume{}
	}
	return ClassedVolume{Class: sc.Name, Provisioner: sc.Provisioner, Parameters: sc.Parameters, MountOptions: sc.MountOptions}
}

// DefaultStorageClass is the class the DefaultStorageClass admission plugin gives a claim
// without spec.storageClassName, nil for none: of the classes annotated as the default,
// the newest (creationTimestamp), then the first by name, as Kubernetes picks.
func DefaultStorageClass(classes []*storagev1.StorageClass) *storagev1.StorageClass {
	var best *storagev1.StorageClass
	for _, sc := range classes {
		if sc == nil || (sc.Annotations[annotationDefaultClass] != "true" && sc.Annotations[annotationBetaDefaultClass] != "true") {
			continue
		}
		if best == nil {
			best = sc
			continue
		}
		a, b := sc.CreationTimestamp.UnixNano(), best.CreationTimestamp.UnixNano()
		if a > b || (a == b && sc.Name < best.Name) {
			best = sc
		}
	}
	return best
}

// classAttributes are the volume attributes of a class of the driver, what its provisioner
// puts in every PersistentVolume but the claim's own only-dir: classparams.AttributeParams,
// read the same way whether or not the class is valid (a class its provisioner refuses is
// still the driver's, and the pod must have its sidecar once the class is fixed), so the
// admission path never runs the class's full check.
func classAttributes(params map[string]string) map[string]string {
	return classparams.AttributeParams(params)
}

// driverVolumes maps the name of every pod volume served by the driver (an inline CSI
// volume, a claim bound or pre-bound to one of its PersistentVolumes or of a class it
// provisions, a generic ephemeral volume of such a class) to its volumeAttributes (nil for
// none).
type driverVolumes map[string]map[string]string

func (d driverVolumes) has(name string) bool {
	_, ok := d[name]
	return ok
}

// unresolvedClaim is a claim volume the webhook could not resolve: err is nil for a claim
// that is not bound (or does not exist) and that no volume's claimRef and no StorageClass
// tells about.
type unresolvedClaim struct {
	volume, claim string
	// ephemeral is set for a generic ephemeral volume, whose claim does not exist yet
	// (claim is "").
	ephemeral bool
	err       error
}

// what names the claim in a warning.
func (c unresolvedClaim) what() string {
	if c.ephemeral {
		return "its ephemeral claim"
	}
	return "claim " + c.claim
}

// usage is how a pod uses the driver, as far as admission can tell.
type usage struct {
	// skipped are the pod's claim and ephemeral volumes not looked up, MaxLookups spent.
	skipped []string
	// vols are the pod's volumes of the driver, inline, claims and ephemeral.
	vols driverVolumes
	// inline are the names of the pod's inline CSI volumes of the driver; claims those of
	// its persistentVolumeClaim volumes bound to the driver's volumes or pending in a class
	// the driver provisions; ephemeral those of its generic ephemeral volumes of such a
	// class. The last are a list of their own, not claims: their claim does not exist yet
	// (it is named after the pod, which may not have its name yet), so what a message says
	// of them cannot name one. All sorted; volumes() lists the three.
	inline, claims, ephemeral []string
	// unresolved are claims the webhook could not resolve (unbound, lookup failed): if
	// one turns out to be the driver's, the node plugin fails its mount naming the cause.
	unresolved []unresolvedClaim
	// sidecar are the vols the pod's sidecar serves: all but the shared ones. Every
	// decision about the sidecar (whether the pod needs one, where it goes, which init
	// containers it serves, whether a legacy pod would hang, its cache volume) reads these.
	sidecar driverVolumes
	// shared are the names of the vols whose contract.AttrMountMode is
	// contract.MountModeShared, sorted: the node's shared mounter serves them, not the
	// sidecar.
	shared []string
}

func (u usage) uses() bool { return len(u.vols) > 0 }

func (u usage) volumes() string {
	return strings.Join(slices.Concat(u.inline, u.claims, u.ephemeral), ", ")
}

// notInjectedWarnings are the warnings for a pod that gets no sidecar because no volume was
// recognised: an unresolved claim may be the driver's.
func (u usage) notInjectedWarnings(driver string) []string {
	out := u.skippedWarnings(driver)
	for _, c := range u.unresolved {
		if c.err != nil {
			out = append(out, fmt.Sprintf(
				"volume %s: cannot tell whether %s is a %s volume (%v); if it is, the pod gets no gcsfuse sidecar and its mount fails: add the annotation %s: \"true\"",
				c.volume, c.what(), driver, c.err, contract.AnnotationInject))
			continue
		}
		remedy := "bind it first, or add"
		if c.ephemeral {
			remedy = "add"
		}
		out = append(out, fmt.Sprintf(
			"volume %s: %s is not bound to a volume yet; if it binds to a %s volume, the pod has no gcsfuse sidecar and its mount fails: %s the annotation %s: \"true\"",
			c.volume, c.what(), driver, remedy, contract.AnnotationInject))
	}
	return out
}

// skippedWarnings is one warning for all the volumes not looked up (MaxLookups).
func (u usage) skippedWarnings(driver string) []string {
	if len(u.skipped) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d volumes not looked up (%s, ...): the pod names more than %d claims and classes to read at admission; any of them that is a %s volume gets no gcsfuse sidecar and its mount fails: add the annotation %s: \"true\"",
		len(u.skipped), u.skipped[0], MaxLookups, driver, contract.AnnotationInject)}
}

// injectedWarnings are the warnings for a pod that gets the sidecar: an unresolved claim
// matters only when an init container mounts it, since whether that container needs the
// sidecar running (and, in legacy mode, whether the pod would hang) cannot be told. A
// claim that only regular containers mount is served either way, so the common case of a
// WaitForFirstConsumer claim beside a bucket gets no noise.
func (u usage) injectedWarnings(driver string, init []corev1.Container) []string {
	out := u.skippedWarnings(driver)
	for _, c := range u.unresolved {
		var readers []string
		for _, ic := range init {
			// A placeholder or the GKE add-on's sidecar: a sidecar either way, never a reader.
			if !isLentName(ic.Name, true) && slices.ContainsFunc(ic.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == c.volume }) {
				readers = append(readers, ic.Name)
			}
		}
		if len(readers) == 0 {
			continue
		}
		why := "is not bound to a volume yet"
		if c.err != nil {
			why = fmt.Sprintf("could not be resolved (%v)", c.err)
		}
		out = append(out, fmt.Sprintf(
			"volume %s: %s %s; if it is a %s volume, the gcsfuse sidecar does not know that init containers %s use it",
			c.volume, c.what(), why, driver, strings.Join(readers, ", ")))
	}
	return out
}

// classLookups resolves the StorageClasses of one admission, each class (and the default
// one) looked up once however many volumes name it.
type classLookups struct {
	claims VolumeClaims
	driver string
	done   map[string]classLookup
	// spent counts the admission's look-ups, claims and classes (MaxLookups).
	spent int
}

// errOverBudget: a StorageClass not looked up, the admission's MaxLookups spent.
var errOverBudget = errors.New("not looked up: the pod names too many claims and classes")

// spend counts one look-up, and reports false once MaxLookups are spent.
func (l *classLookups) spend() bool {
	if l.spent >= MaxLookups {
		return false
	}
	l.spent++
	return true
}

type classLookup struct {
	cv  ClassedVolume
	err error
}

// classDecision is what a StorageClass says of a volume not bound yet.
type classDecision int

const (
	// classOther: a class another provisioner provisions: not the driver's volume.
	classOther classDecision = iota
	// classOurs: a class the driver provisions.
	classOurs
	// classStatic: no class, or one that provisions nothing: only a PersistentVolume made
	// beforehand binds the claim, which may be the driver's.
	classStatic
)

// resolve looks up className (nil: the default class) and says what it makes of a volume
// of it, with the volume's attributes when it is the driver's.
func (l *classLookups) resolve(ctx context.Context, className *string) (classDecision, map[string]string, error) {
	key := "\x00default" // not a valid class name
	if className != nil {
		key = *className
	}
	r, ok := l.done[key]
	if !ok {
		if !l.spend() {
			return classStatic, nil, errOverBudget
		}
		r.cv, r.err = l.claims.ClassVolume(ctx, className)
		l.done[key] = r
	}
	switch {
	case r.err != nil:
		return classStatic, nil, r.err
	case r.cv.Class == "" || r.cv.Provisioner == noProvisioner:
		return classStatic, nil, nil
	case r.cv.Provisioner == l.driver:
		return classOurs, withMountOptions(classAttributes(r.cv.Parameters), r.cv.MountOptions), nil
	}
	return classOther, nil, nil
}

// needsLookup reports whether a pod volume is resolved through VolumeClaims.
func needsLookup(v corev1.Volume) bool { return driverpod.Classify(&v, "") == driverpod.Claim }

// driverUsage finds the pod's volumes of the driver, installed as driver, with their
// attributes. claims may be nil (no lookups: only inline volumes are seen). It is called
// once per admission and bounded by claimLookupTimeout altogether.
func driverUsage(ctx context.Context, claims VolumeClaims, driver, namespace string, volumes []corev1.Volume) usage {
	u := usage{vols: driverVolumes{}}
	for i := range volumes {
		if v := &volumes[i]; driverpod.Classify(v, driver) == driverpod.Inline {
			u.vols[v.Name] = v.CSI.VolumeAttributes
			u.inline = append(u.inline, v.Name)
		}
	}
	if claims != nil && slices.ContainsFunc(volumes, needsLookup) {
		ctx, cancel := context.WithTimeout(ctx, claimLookupTimeout)
		defer cancel()
		classes := &classLookups{claims: claims, driver: driver, done: map[string]classLookup{}}
		// Each claim is looked up once however many volumes name it: a pod may name one claim
		// a thousand times, each a GET otherwise.
		firstOf := map[string]string{} // claim -> the first volume naming it
		for _, v := range volumes {
			switch {
			case v.PersistentVolumeClaim != nil:
				claim := v.PersistentVolumeClaim.ClaimName
				if first, ok := firstOf[claim]; ok {
					u.sameAs(v.Name, first)
					continue
				}
				if !classes.spend() {
					u.skipped = append(u.skipped, v.Name)
					continue
				}
				firstOf[claim] = v.Name
				u.claim(ctx, claims, classes, driver, namespace, v.Name, claim)
			case v.Ephemeral != nil && v.Ephemeral.VolumeClaimTemplate != nil:
				// The claim is made from the template after the pod, its storageClassName
				// filled in with the default class's when nil. No class, or one that
				// provisions nothing: a volume made beforehand for a claim that does not
				// exist yet is not a thing, so it is not ours, and unlike a claim's no
				// warning says it may be.
				switch d, attrs, err := classes.resolve(ctx, v.Ephemeral.VolumeClaimTemplate.Spec.StorageClassName); {
				case errors.Is(err, errOverBudget):
					u.skipped = append(u.skipped, v.Name)
				case err != nil:
					u.unresolved = append(u.unresolved, unresolvedClaim{volume: v.Name, ephemeral: true, err: err})
				case d == classOurs:
					u.vols[v.Name] = attrs
					u.ephemeral = append(u.ephemeral, v.Name)
				}
			}
		}
	}
	slices.Sort(u.inline)
	slices.Sort(u.claims)
	slices.Sort(u.ephemeral)
	u.splitShared()
	return u
}

// sameAs resolves the pod's volume name as the volume first, which names the same claim.
func (u *usage) sameAs(name, first string) {
	if attrs, ok := u.vols[first]; ok {
		u.vols[name] = attrs
		u.claims = append(u.claims, name)
	}
	for _, c := range u.unresolved {
		if c.volume == first {
			c.volume = name
			u.unresolved = append(u.unresolved, c)
			return
		}
	}
}

// claim resolves the pod's volume name, the persistentVolumeClaim claim: its bound volume,
// or the one pre-bound to it by its claimRef, else its StorageClass.
func (u *usage) claim(ctx context.Context, claims VolumeClaims, classes *classLookups, driver, namespace, name, claim string) {
	cv, err := claims.ClaimVolume(ctx, namespace, claim)
	switch {
	case err != nil:
		u.unresolved = append(u.unresolved, unresolvedClaim{volume: name, claim: claim, err: err})
		return
	case cv.Bound:
		if cv.Driver == driver {
			u.vols[name] = withMountOptions(cv.Attributes, cv.MountOptions)
			u.claims = append(u.claims, name)
		}
		return
	case !cv.Pending:
		// No such claim, or its volume is gone.
		u.unresolved = append(u.unresolved, unresolvedClaim{volume: name, claim: claim})
		return
	}
	d, attrs, err := classes.resolve(ctx, cv.StorageClassName)
	if lp, ok := claims.(livePrebound); ok && cv.MaybeStale && (err != nil || d == classStatic) {
		// The class does not tell: a volume pre-bound to the claim a moment ago may be
		// missing from the cache still (prebound.go).
		if live, lerr := lp.PreboundLive(ctx, namespace, claim); lerr == nil && live.Bound {
			if live.Driver == driver {
				u.vols[name] = withMountOptions(live.Attributes, live.MountOptions)
				u.claims = append(u.claims, name)
			}
			return
		}
	}
	switch {
	case err != nil:
		u.unresolved = append(u.unresolved, unresolvedClaim{volume: name, claim: claim, err: err})
	case d == classOurs:
		u.vols[name] = attrs
		u.claims = append(u.claims, name)
	case d == classStatic:
		u.unresolved = append(u.unresolved, unresolvedClaim{volume: name, claim: claim})
	}
	// classOther: another provisioner's claim, certainly not ours: no warning.
}
