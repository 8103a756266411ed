// Package mountopts turns user-supplied mount options and volume attributes into gcsfuse
// flags through an explicit policy over gcsfuse's own parameter table at the pinned version
// (gcsfuse_params.go, generated; policy.go). Anything the policy does not accept is rejected
// with an error that names the option: silently dropping a flag (as the incumbent does)
// leaves users debugging a mount that ignores what they asked for, and passing unknown flags
// through would let a pod author take over flags the driver owns (endpoints, credentials,
// paths).
package mountopts

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/lazyre"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Error names the offending option and says why it was refused.
type Error struct {
	Option string
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("mount option %q: %s", e.Option, e.Reason) }

// Result is the translation of a set of options.
type Result struct {
	// Flags are gcsfuse command-line flags, "--name" or "--name=value", in input order
	// (for FromAttributes, the fixed order it documents).
	Flags []string
	// ReadOnly is set by the "ro" option.
	ReadOnly bool
	// NoExec and NoAtime are kernel mount flags the node plugin applies.
	NoExec  bool
	NoAtime bool
	// ReadAheadKB is the kernel read-ahead of the mount (the "read_ahead_kb" option, as the
	// GKE driver takes it), which the node plugin writes to the mount's BDI; nil: the
	// kernel's default.
	ReadAheadKB *int
}

// readAheadOption is the kernel read-ahead option's name (the GKE driver's spelling).
const readAheadOption = "read_ahead_kb"

// MaxReadAheadKB bounds the read_ahead_kb option: 128 MiB of read-ahead per open file is
// already far beyond what helps a sequential reader, and each reader may hold that much
// page cache in flight.
const MaxReadAheadKB = 128 << 10

type kind int

const (
	kBool kind = iota
	kInt
	kFloat
	kOctal
	kDuration
	kEnum
	kPattern
	// kString is a string param no override narrows: any value without whitespace (Parse
	// refuses that), that cannot be read as a flag, and of sane length.
	kString
)

type spec struct {
	kind     kind
	min, max float64
	enum     []string
	pattern  *lazyre.Regexp
}

var (
	pathPattern    = lazyre.New(`^[A-Za-z0-9._~@+/-]+$`)
	projectPattern = lazyre.New(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
	regexPattern   = lazyre.New(`^[^\s,]+$`)
	// machineTypePattern takes the instance types clouds put in a Node's
	// node.kubernetes.io/instance-type label: n2-standard-4, m5.large, Standard_D2s_v3.
	machineTypePattern = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

func intRange(min, max float64) spec   { return spec{kind: kInt, min: min, max: max} }
func floatRange(min, max float64) spec { return spec{kind: kFloat, min: min, max: max} }
func enum(v ...string) spec            { return spec{kind: kEnum, enum: v} }

const maxMiB = 1 << 30

// overrides are value checks and explicit decisions on top of gcsfuse's parameter table
// (policy.go): ranges and patterns narrower than the bare type, and enums. A param listed
// here is accepted with this check, even where the table alone would refuse it (hidden or
// deprecated), which acceptedDespite must then explain (TestPolicyConsistent).
var overrides = map[string]spec{
	"uid":                                    intRange(0, math.MaxInt32),
	"gid":                                    intRange(0, math.MaxInt32),
	"only-dir":                               {kind: kPattern, pattern: pathPattern},
	"billing-project":                        {kind: kPattern, pattern: projectPattern},
	"file-cache-include-regex":               {kind: kPattern, pattern: regexPattern},
	"file-cache-exclude-regex":               {kind: kPattern, pattern: regexPattern},
	"rename-dir-limit":                       intRange(0, 10_000_000),
	"stat-cache-max-size-mb":                 intRange(-1, maxMiB),
	"type-cache-max-size-mb":                 intRange(-1, maxMiB),
	"metadata-cache-ttl-secs":                intRange(-1, math.MaxInt32),
	"metadata-cache-negative-ttl-secs":       intRange(-1, math.MaxInt32),
	"kernel-list-cache-ttl-secs":             intRange(-1, math.MaxInt32),
	"max-conns-per-host":                     intRange(0, 100_000),
	"max-idle-conns-per-host":                intRange(0, 100_000),
	"sequential-read-size-mb":                intRange(1, 1024),
	"file-cache-max-size-mb":                 intRange(-1, maxMiB),
	"file-cache-parallel-downloads-per-file": intRange(1, 1000),
	"file-cache-max-parallel-downloads":      intRange(-1, 100_000),
	"file-cache-download-chunk-size-mb":      intRange(1, 1024),
	"write-global-max-blocks":                intRange(-1, maxMiB),
	"read-global-max-blocks":                 intRange(-1, maxMiB),
	"max-retry-attempts":                     intRange(0, 1000),
	"limit-bytes-per-sec":                    floatRange(-1, 1e13),
	"limit-ops-per-sec":                      floatRange(-1, 1e9),
	"retry-multiplier":                       floatRange(1, 100),
	"trace-sampling-ratio":                   floatRange(0, 1),
	"max-retry-sleep":                        {kind: kDuration, max: float64(time.Hour)},
	"http-client-timeout":                    {kind: kDuration, max: float64(time.Hour)},
	"log-severity":                           enum("trace", "debug", "info", "warning", "error", "off"),
	"log-format":                             enum("text", "json"),
	// httpmtls (new in 3.13) is left out: it hands connection set-up to the client library,
	// beside the driver's own endpoint and token handling.
	"client-protocol": enum("http1", "http2", "grpc"),
	"profile":         enum("aiml-training", "aiml-serving", "aiml-checkpointing"),
	"experimental-metadata-prefetch-on-mount": enum("disabled", "sync", "async"),
	// machine-type spares gcsfuse its metadata-server lookups at start; the node plugin sets
	// it from the Node (csidriver.Config.MachineType) unless a volume does.
	"machine-type": {kind: kPattern, pattern: machineTypePattern},
	// prometheus-port=0 turns off a volume's gcsfuse metrics (the incumbent's disableMetrics):
	// the sidecar then gives that gcsfuse no port. Any other port is the driver's to choose.
	MetricsPortOption: enum("0"),
}

// MetricsPortOption is the one driver-owned gcsfuse flag a volume may set, and only to 0.
const MetricsPortOption = "prometheus-port"

// NoMetricsFlag is the flag MetricsPortOption=0 becomes.
const NoMetricsFlag = "--" + MetricsPortOption + "=0"

// owned are flags the driver sets itself; naming them gets a specific refusal.
var owned = map[string]bool{
	"temp-dir": true, "cache-dir": true, "log-file": true, "config-file": true, "key-file": true,
	"token-url": true, "reuse-token-from-url": true, "custom-endpoint": true,
	"anonymous-access": true, "foreground": true, "o": true,
	"app-name": true, "ignore-interrupts": true, "s2a-address": true, "s2a-spiffe-id": true,
	"log-rotate-max-file-size-mb": true, "log-rotate-backup-file-count": true,
	"log-rotate-compress": true, "debug_invariants": true, "debug_mutex": true,
	"help": true, "version": true, "cloud-metrics-export-interval-secs": true,
}

// Split splits a comma-separated option list (the "mountOptions" volume attribute, or one
// entry of a PersistentVolume's mountOptions), dropping empty elements.
func Split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Parse translates options, each "name", "name=value" (name a gcsfuse flag without dashes),
// or the config-file form of the GKE driver's documentation, "section:key:value" (a key of
// gcsfuse's config file, "metadata-cache:stat-cache-max-size-mb:-1"), which becomes the flag
// gcsfuse's parameter table gives that key (--stat-cache-max-size-mb=-1): the flag is not
// always section-key. An option given in both forms is given more than once.
func Parse(options []string) (*Result, error) {
	res := &Result{}
	seen := map[string]bool{}
	for _, opt := range options {
		o, name, value, hasValue, configForm, err := splitOption(opt)
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, &Error{opt, "given more than once"}
		}
		seen[name] = true
		switch name {
		case "ro", "rw":
			if hasValue {
				return nil, &Error{opt, "takes no value"}
			}
			res.ReadOnly = name == "ro"
			if seen["ro"] && seen["rw"] {
				return nil, &Error{opt, "ro and rw are both given"}
			}
			continue
		case readAheadOption:
			kb, err := strconv.Atoi(value)
			if !hasValue || err != nil || kb < 0 || kb > MaxReadAheadKB {
				return nil, &Error{opt, fmt.Sprintf("takes a whole number of KiB from 0 to %d (read_ahead_kb=1024)", MaxReadAheadKB)}
			}
			res.ReadAheadKB = &kb
			continue
		case "noexec", "noatime", "nodev", "nosuid":
			if hasValue {
				return nil, &Error{opt, "takes no value"}
			}
			res.NoExec = res.NoExec || name == "noexec"
			res.NoAtime = res.NoAtime || name == "noatime"
			continue // nodev and nosuid are always applied
		}
		if o == nil && owned[name] {
			// Owned flags gcsfuse's table does not list (help, version).
			return nil, &Error{opt, ownedReason}
		}
		if o == nil {
			return nil, &Error{opt, fmt.Sprintf("is not a supported gcsfuse option (gcsfuse %s has no such flag)", GCSFuseVersion)}
		}
		if o.refuse != "" {
			return nil, &Error{opt, o.describe(configForm) + o.refuse}
		}
		flag, err := o.check.flag(name, value, hasValue)
		if err != nil {
			return nil, &Error{opt, fmt.Sprintf("%v (--%s takes a gcsfuse %s)", err, name, o.param.Type)}
		}
		res.Flags = append(res.Flags, flag)
	}
	return res, nil
}

// splitOption finds the param an option names (nil for kernel options and unknown flags),
// the flag name, and the value. configForm is set for "section:key:value".
func splitOption(opt string) (o *option, name, value string, hasValue, configForm bool, err error) {
	if opt == "" {
		return nil, "", "", false, false, &Error{opt, "empty option"}
	}
	for _, r := range opt {
		if r <= ' ' || r == 0x7f || r > 0x7e {
			return nil, "", "", false, false, &Error{opt, "contains whitespace, control or non-ASCII characters"}
		}
	}
	if strings.HasPrefix(opt, "-") {
		return nil, "", "", false, false, &Error{opt, "write options without leading dashes"}
	}
	name, value, hasValue = strings.Cut(opt, "=")
	// A colon before any "=" is the config form; its value may hold "=" (a regex).
	if strings.Contains(name, ":") {
		o, _, value, err := resolveConfig(opt)
		if err != nil {
			return nil, "", "", false, false, err
		}
		if o.param.Flag == "" {
			// Named by its config path: there is no flag to name it by.
			return o, o.param.ConfigPath, value, true, true, nil
		}
		return o, o.param.Flag, value, true, true, nil
	}
	if name == "" {
		return nil, "", "", false, false, &Error{opt, "missing option name"}
	}
	return byFlag[name], name, value, hasValue, false, nil
}

func (s spec) flag(name, value string, hasValue bool) (string, error) {
	if s.kind == kBool {
		if !hasValue {
			return "--" + name, nil
		}
		b, err := strconv.ParseBool(value)
		if err != nil {
			return "", fmt.Errorf("value %q is not true or false", value)
		}
		return "--" + name + "=" + strconv.FormatBool(b), nil
	}
	if !hasValue || value == "" {
		return "", fmt.Errorf("needs a value (%s=...)", name)
	}
	switch s.kind {
	case kInt:
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil || float64(n) < s.min || float64(n) > s.max {
			return "", fmt.Errorf("value %q is not an integer in [%d, %d]", value, int64(s.min), int64(s.max))
		}
		value = strconv.FormatInt(n, 10)
	case kFloat:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(f) || f < s.min || f > s.max {
			return "", fmt.Errorf("value %q is not a number in [%g, %g]", value, s.min, s.max)
		}
	case kOctal:
		n, err := strconv.ParseUint(value, 8, 32)
		if err != nil || len(value) < 3 || len(value) > 4 || n > 0o777 {
			return "", fmt.Errorf("value %q is not an octal permission such as 0644", value)
		}
	case kDuration:
		d, err := time.ParseDuration(value)
		if err != nil || d < 0 || float64(d) > s.max {
			return "", fmt.Errorf("value %q is not a duration between 0s and %s", value, time.Duration(s.max))
		}
	case kEnum:
		ok := false
		for _, e := range s.enum {
			ok = ok || e == value
		}
		if !ok && name == MetricsPortOption {
			return "", fmt.Errorf("value %q: only 0 (no metrics for this volume); the driver chooses the port otherwise", value)
		}
		if !ok {
			return "", fmt.Errorf("value %q is not one of %s", value, strings.Join(s.enum, ", "))
		}
	case kString:
		if len(value) > 1024 || strings.HasPrefix(value, "-") {
			return "", fmt.Errorf("value %q is not allowed (at most 1024 characters, not starting with -)", value)
		}
	case kPattern:
		if len(value) > 1024 || !s.pattern.MatchString(value) || strings.HasPrefix(value, "-") || hasDotDot(value) {
			return "", fmt.Errorf("value %q is not allowed", value)
		}
	}
	return "--" + name + "=" + value, nil
}

func hasDotDot(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

// allBuckets is the bucket name with which gcsfuse mounts every bucket the identity can
// reach, each as a directory (ValidateBucket refuses it).
const allBuckets = "_"

// Volume is the validated description of a volume, from NodePublishVolume's inputs.
type Volume struct {
	Bucket string
	// Shared is set when the volume asks for the shared mount mode (contract.AttrMountMode).
	Shared bool
	Result
}

// MountMode reads a volume's contract.AttrMountMode: shared reports whether its gcsfuse runs
// in the node's mounter. Absent or empty is the sidecar mode; any other value is an error
// naming the two accepted.
func MountMode(attrs map[string]string) (shared bool, err error) {
	switch v := attrs[contract.AttrMountMode]; v {
	case "", contract.MountModeSidecar:
		return false, nil
	case contract.MountModeShared:
		return true, nil
	default:
		return false, fmt.Errorf("volume attribute %s %q: want %q (the default: gcsfuse in the pod's sidecar) or %q (gcsfuse in the node's mounter, shared by the pods of the same bucket, options and identity)",
			contract.AttrMountMode, v, contract.MountModeSidecar, contract.MountModeShared)
	}
}

// FromAttributes validates a volume's attributes (volume_context) and mount flags.
// bucketFallback is the volume handle, used for PersistentVolumes that carry no bucketName
// (bucketFromHandle: "bucket" or "bucket:suffix").
// Keys the kubelet adds (csi.storage.k8s.io/...) are accepted; any other unknown key is an
// error, so a misspelt attribute is not silently ignored.
//
// ownAttributes are the volume attributes of this driver: FromAttributes reads the first
// four, pkg/credentials the others (the GKE driver's identityProvider and identityPool
// among them). With incumbentAttrs and csi.storage.k8s.io/ keys, they are what a volume may
// carry; the error naming an unknown one lists them from here.
var ownAttributes = []string{
	contract.AttrBucketName, contract.AttrMountOptions, contract.AttrFileCacheCapacity, contract.AttrMountMode,
	contract.AttrWorkloadIdentityProvider, contract.AttrServiceAccount, contract.AttrTokenURL,
	contract.AttrGKEIdentityProvider, contract.AttrGKEIdentityPool,
}

// knownAttribute reports whether a volume may carry the attribute k.
func knownAttribute(k string) bool {
	return slices.Contains(ownAttributes, k) || incumbentAttrs[k] != nil || strings.HasPrefix(k, "csi.storage.k8s.io/")
}

// The flags come out in a fixed order, never in map order: first the mount flags (in the
// order given), then the mountOptions attribute (in its order), then the flag for
// fileCacheCapacity, then the GKE driver's attributes (incumbent.go). The node service compares a republished volume with the published one
// field by field, so the same request must always give the same Flags; a fixed order also
// makes a "given more than once" error name the same option every time. With several
// unknown attributes, the error names the first in sorted order, for the same reason.
func FromAttributes(attrs map[string]string, mountFlags []string, bucketFallback string) (*Volume, error) {
	var unknown []string
	for k := range attrs {
		if !knownAttribute(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("unknown volume attribute %q (supported: %s; and the GKE driver's %s)", unknown[0],
			strings.Join(ownAttributes, ", "), strings.Join(slices.Sorted(maps.Keys(incumbentAttrs)), ", "))
	}
	shared, err := MountMode(attrs)
	if err != nil {
		return nil, err
	}
	opts, _, err := withCacheCapacity(attrs, givenOptions(attrs, mountFlags))
	if err != nil {
		return nil, err
	}
	aliased, err := incumbentOptions(attrs)
	if err != nil {
		return nil, err
	}
	opts = append(opts, aliased...)
	bucket := bucketFallback
	if v, ok := attrs[contract.AttrBucketName]; ok {
		bucket = v
	} else if bucket, err = bucketFromHandle(bucketFallback); err != nil {
		return nil, err
	}
	if err := ValidateBucket(bucket); err != nil {
		return nil, err
	}
	res, err := Parse(opts)
	if err != nil {
		return nil, err
	}
	return &Volume{Bucket: bucket, Shared: shared, Result: *res}, nil
}

// withCacheCapacity adds the file cache's size that the fileCacheCapacity attribute asks
// for to opts, resolving a size given there too as the GKE driver does (cacheSizePairing).
func withCacheCapacity(attrs map[string]string, opts []string) ([]string, *Mapping, error) {
	v, ok := attrs[contract.AttrFileCacheCapacity]
	if !ok {
		return opts, nil, nil
	}
	mib, err := capacityMiB(v)
	if err != nil {
		return nil, nil, fmt.Errorf("volume attribute %s: %w", contract.AttrFileCacheCapacity, err)
	}
	out, pairing := cacheSizePairing(opts, mib)
	return out, pairing, nil
}

// givenOptions are the options a volume gives as options: its mount flags (a
// PersistentVolume's mountOptions, each entry a comma-separated list) and then its
// mountOptions attribute, in that order.
func givenOptions(attrs map[string]string, mountFlags []string) []string {
	var opts []string
	for _, f := range mountFlags {
		opts = append(opts, Split(f)...)
	}
	if v, ok := attrs[contract.AttrMountOptions]; ok {
		opts = append(opts, Split(v)...)
	}
	return opts
}

func capacityMiB(v string) (int64, error) {
	if v == "-1" {
		return -1, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("value %q is not a size such as 10Gi, or -1 for unlimited", v)
	}
	return (q.Value() + (1<<20 - 1)) >> 20, nil
}

// handleSuffixPattern is what may follow the bucket in a volume handle: a label of
// letters, digits, '-', '_' and '.', as a Kubernetes label value (without the empty one).
var handleSuffixPattern = lazyre.New(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// bucketFromHandle is the bucket a PersistentVolume's volume handle names: the handle
// itself, or for "bucket:suffix" the part before the first ':'. The GKE driver reads
// handles so because the kubelet mounts two PersistentVolumes with the same handle in one
// pod only once (the pod then never starts): a suffix per PersistentVolume lets one pod
// mount the same bucket twice (say, with different options). ':' is never part of a bucket
// name, so nothing else could be meant; a suffix that is not a label (empty, or holding
// '/', another ':' or whitespace) is refused rather than guessed at. The handle still
// identifies the volume everywhere else.
func bucketFromHandle(handle string) (string, error) {
	bucket, suffix, ok := strings.Cut(handle, ":")
	if !ok {
		return handle, nil
	}
	if !handleSuffixPattern.MatchString(suffix) {
		return "", fmt.Errorf("volume handle %q: the part after the first ':' (%q) must be a label of 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (bucket:suffix mounts the bucket before the ':')",
			handle, suffix)
	}
	return bucket, nil
}

// ValidateBucket checks a GCS bucket name (3-63 characters, or up to 222 with dots, of
// lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit).
//
// "_" (gcsfuse's all-buckets mode, which the GKE driver passes through) is refused with
// its own reason: a volume here is one bucket, which its mount source, metrics, Events and
// credentials name, and in that mode gcsfuse 3.13 cannot list its root (ENOTSUP: each
// bucket appears only when looked up by name) and checks no bucket at start, so a typo or
// a missing permission would show up only as a failed lookup inside the app.
func ValidateBucket(b string) error {
	if b == "" {
		return fmt.Errorf("bucket name is empty: set volumeAttributes.%s or the volume handle", contract.AttrBucketName)
	}
	if b == allBuckets {
		return fmt.Errorf("bucket name %q (gcsfuse's all-buckets mode) is not supported: a volume here mounts one bucket, which its mount, metrics and events name; in that mode gcsfuse cannot list its root and finds out only on first lookup that a bucket is missing or forbidden. Use one volume per bucket", b)
	}
	limit := 63
	if strings.Contains(b, ".") {
		limit = 222
	}
	if len(b) < 3 || len(b) > limit {
		return fmt.Errorf("bucket name %q must be 3-%d characters", b, limit)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !alnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("bucket name %q has invalid character %q", b, c)
		}
	}
	if !alnum(b[0]) || !alnum(b[len(b)-1]) {
		return fmt.Errorf("bucket name %q must start and end with a letter or digit", b)
	}
	return nil
}
