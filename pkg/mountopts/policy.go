package mountopts

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// What a pod may set is derived from gcsfuse's own parameter table at the pinned version
// (gcsfuse_params.go), not from a hand-written list, so that every option gcsfuse documents
// is either accepted with its type checked or refused with a reason, and a gcsfuse upgrade
// that adds or drops a param is decided on here rather than forgotten. In order:
//
//  1. a param with no flag is refused: volumes reach gcsfuse only as flags;
//  2. driver-owned flags (owned) are refused as such;
//  3. overrides (mountopts.go) accept with their narrower check;
//  4. refused (below) and the types in refusedTypes are refused as dangerous, with a reason;
//  5. deprecated and hidden params are refused: gcsfuse warns about the first and leaves
//     the second out of its help (internal, experimental, or a debugging aid);
//  6. everything else is accepted with the check its type implies.

// option is the policy's decision on one gcsfuse param.
type option struct {
	param gcsfuseParam
	// refuse is why a volume may not set the param; empty when it may.
	refuse string
	// check is the value check when it may.
	check spec
}

// acceptedDespite explains each override of a param the table alone would refuse.
var acceptedDespite = map[string]string{
	"machine-type": "hidden in gcsfuse, but the node plugin itself passes it (csidriver.Config.MachineType), " +
		"and a volume may correct it",
	"experimental-metadata-prefetch-on-mount": "deprecated in gcsfuse, but it is what the GKE driver's " +
		"gcsfuseMetadataPrefetchOnMount attribute stands for (incumbent.go)",
}

// refused are params a volume may not set although gcsfuse documents them, and why.
var refused = map[string]string{
	"enable-experimental-shared-chunk-cache": "makes gcsfuse share its cache directory with other mounts " +
		"(gcsfuse's own words: e.g. on NFS); the driver lays out one cache directory per volume",
}

// refusedTypes are gcsfuse types no volume may set, and why.
var refusedTypes = map[string]string{
	"resolvedPath": "is a path in the sidecar's file system, which the driver lays out",
	"[]string":     "is a list, and lists cannot be written in a comma-separated mountOptions",
}

// enumTypes are the choices of gcsfuse's enum types (its cfg/types.go); params.yaml names
// the type but gives the choices only in prose. A type in neither this map, refusedTypes
// nor the basic types is refused until added (TestPolicyConsistent lists it).
var enumTypes = map[string][]string{
	"logSeverity":        {"trace", "debug", "info", "warning", "error", "off"},
	"protocol":           {"http1", "http2", "grpc"},
	"rapidWriteStrategy": {"enabled", "disabled"},
	"directPathStrategy": {"direct-path-only", "direct-path-with-fallback"},
}

// Checks of the basic types where no override narrows them: a generous range, so that
// gcsfuse, not the driver, judges the value, but one a float64 holds exactly.
var (
	anyInt      = intRange(-(1 << 53), 1<<53)
	anyFloat    = floatRange(-math.MaxFloat64, math.MaxFloat64)
	anyDuration = spec{kind: kDuration, max: float64(24 * time.Hour)}
)

const ownedReason = "is set by the driver and cannot be changed by a volume"

var byFlag, byConfigPath = buildPolicy(gcsfuseParams)

func buildPolicy(params []gcsfuseParam) (flags, paths map[string]*option) {
	flags, paths = map[string]*option{}, map[string]*option{}
	for _, p := range params {
		o := decide(p)
		if p.Flag != "" {
			flags[p.Flag] = o
		}
		if p.ConfigPath != "" {
			paths[p.ConfigPath] = o
		}
	}
	return flags, paths
}

func decide(p gcsfuseParam) *option {
	o := &option{param: p}
	if p.Flag == "" {
		o.refuse = fmt.Sprintf("has no command-line flag in gcsfuse %s, and this driver passes volume options to gcsfuse only as flags", GCSFuseVersion)
		return o
	}
	if owned[p.Flag] {
		o.refuse = ownedReason
		return o
	}
	if sp, ok := overrides[p.Flag]; ok {
		o.check = sp
		return o
	}
	if r, ok := refused[p.Flag]; ok {
		o.refuse = r
		return o
	}
	if r, ok := refusedTypes[p.Type]; ok {
		o.refuse = r
		return o
	}
	if p.Deprecated != "" {
		o.refuse = fmt.Sprintf("is deprecated in gcsfuse %s (%s)", GCSFuseVersion, p.Deprecated)
		return o
	}
	if p.Hidden {
		o.refuse = fmt.Sprintf("is hidden in gcsfuse %s (internal, experimental or a debugging aid)", GCSFuseVersion)
		return o
	}
	switch p.Type {
	case "bool":
		o.check = spec{kind: kBool}
	case "int":
		o.check = anyInt
	case "float64":
		o.check = anyFloat
	case "duration":
		o.check = anyDuration
	case "octal":
		o.check = spec{kind: kOctal}
	case "string":
		o.check = spec{kind: kString}
	default:
		if choices, ok := enumTypes[p.Type]; ok {
			o.check = enum(choices...)
		} else {
			o.refuse = fmt.Sprintf("has gcsfuse type %q, which this driver cannot check yet", p.Type)
		}
	}
	return o
}

// resolveConfig maps the config-file form "section:key:value" (or "key:value" for a
// top-level key) to the param it names and the value. Config paths are prefix-free
// (TestConfigPathsArePrefixFree), so at most one split point names a param; the value may
// itself hold colons (a regex). key is the key as written, for errors.
func resolveConfig(opt string) (o *option, key, value string, err error) {
	parts := strings.Split(opt, ":")
	for _, p := range parts[:len(parts)-1] {
		if p == "" {
			return nil, "", "", &Error{opt, `config-file style options are "section:key:value"`}
		}
	}
	for i := len(parts) - 1; i >= 1; i-- {
		if o := byConfigPath[strings.Join(parts[:i], ".")]; o != nil {
			return o, strings.Join(parts[:i], ":"), strings.Join(parts[i:], ":"), nil
		}
	}
	key = strings.Join(parts[:len(parts)-1], ":")
	return nil, key, "", &Error{opt, fmt.Sprintf(`%q is not a gcsfuse %s config key ("section:key:value"; %s)`, key, GCSFuseVersion, configKeyHint(parts[0]))}
}

// configKeyHint lists the keys of a section a volume may set, so that a misspelt key is
// quick to fix.
func configKeyHint(section string) string {
	var keys []string
	for path, o := range byConfigPath {
		if rest, ok := strings.CutPrefix(path, section+"."); ok && o.refuse == "" {
			keys = append(keys, strings.ReplaceAll(rest, ".", ":"))
		}
	}
	if len(keys) == 0 {
		return fmt.Sprintf("no section %q with keys a volume may set", section)
	}
	sort.Strings(keys)
	if len(keys) > 12 {
		keys = append(keys[:12], "...")
	}
	return fmt.Sprintf("section %q has %s", section, strings.Join(keys, ", "))
}

// describe says what an option means, for config-form errors: the flag it stands for.
func (o *option) describe(configForm bool) string {
	if configForm && o.param.Flag != "" {
		return "means --" + o.param.Flag + ", which "
	}
	return ""
}
