package mountopts

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The hand-written parts of the policy must keep describing the gcsfuse the table describes:
// after a version bump, an override, refusal or owned flag that gcsfuse dropped, a hidden or
// deprecated param accepted without a reason, or a type the driver cannot check, is listed
// here rather than silently doing nothing.
func TestPolicyConsistent(t *testing.T) {
	notInTable := map[string]bool{"help": true, "version": true, "config-file": true} // gcsfuse's command's own, not params.yaml's
	for name := range owned {
		if byFlag[name] == nil && !notInTable[name] {
			t.Errorf("owned flag %q is not a gcsfuse %s flag", name, GCSFuseVersion)
		}
	}
	kinds := map[string]kind{"int": kInt, "float64": kFloat, "duration": kDuration, "octal": kOctal, "string": kPattern}
	for name, sp := range overrides {
		o := byFlag[name]
		if o == nil {
			t.Errorf("override for %q, which is not a gcsfuse %s flag", name, GCSFuseVersion)
			continue
		}
		if want, ok := kinds[o.param.Type]; ok && sp.kind != want && sp.kind != kEnum {
			t.Errorf("override for %q checks kind %d, but gcsfuse's type is %s", name, sp.kind, o.param.Type)
		}
		if o.param.Type == "bool" {
			t.Errorf("override for bool %q: the table's type already checks it", name)
		}
		hiddenOrDeprecated := o.param.Hidden || o.param.Deprecated != ""
		if hiddenOrDeprecated != (acceptedDespite[name] != "") {
			t.Errorf("override for %q: hidden or deprecated = %v, but acceptedDespite explains it: %v", name, hiddenOrDeprecated, acceptedDespite[name] != "")
		}
	}
	for name := range acceptedDespite {
		if _, ok := overrides[name]; !ok {
			t.Errorf("acceptedDespite explains %q, which has no override", name)
		}
	}
	for name := range refused {
		if byFlag[name] == nil {
			t.Errorf("refused flag %q is not a gcsfuse %s flag", name, GCSFuseVersion)
		}
	}
	for _, p := range gcsfuseParams {
		o := byFlag[p.Flag]
		if p.Flag == "" {
			o = byConfigPath[p.ConfigPath]
		}
		if strings.Contains(o.refuse, "cannot check yet") {
			t.Errorf("%s: %s: add its choices to enumTypes, or refuse the type in refusedTypes", p.Flag, o.refuse)
		}
	}
}

// The accepted set at the pinned version, in full: a change to the table or the policy that
// widens or narrows what a pod may set shows up here as a diff to review.
func TestAcceptedFlags(t *testing.T) {
	var got []string
	for name, o := range byFlag {
		if o.refuse == "" {
			got = append(got, name)
		}
	}
	sort.Strings(got)
	want := []string{
		"billing-project", "client-protocol", "dir-mode", "enable-buffered-read",
		"enable-kernel-reader", "enable-metadata-prefetch", "enable-nonexistent-type-cache",
		"enable-rapid-appends", "enable-streaming-writes", "experimental-enable-optimized-metadata-cache",
		"experimental-metadata-prefetch-on-mount", "file-cache-cache-file-for-range-read",
		"file-cache-download-chunk-size-mb", "file-cache-enable-parallel-downloads",
		"file-cache-exclude-regex", "file-cache-include-regex", "file-cache-max-parallel-downloads",
		"file-cache-max-size-mb", "file-cache-parallel-downloads-per-file", "file-mode", "gid",
		"http-client-timeout", "implicit-dirs", "kernel-list-cache-ttl-secs", "limit-bytes-per-sec",
		"limit-ops-per-sec", "log-format", "log-severity", "machine-type", "max-conns-per-host",
		"max-idle-conns-per-host", "max-retry-attempts", "max-retry-sleep",
		"metadata-cache-negative-ttl-secs", "metadata-cache-ttl-secs", "metadata-prefetch-entries-limit",
		"metadata-prefetch-max-workers", "only-dir", "profile", "prometheus-port", "rapid-write",
		"read-global-max-blocks", "rename-dir-limit", "retry-multiplier", "sequential-read-size-mb",
		"stat-cache-max-size-mb", "strong-consistency-on-open", "trace-sampling-ratio",
		"type-cache-max-size-mb", "uid", "write-global-max-blocks",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("accepted flags at gcsfuse %s:\n got %q\nwant %q", GCSFuseVersion, got, want)
	}
}

// A config key gcsfuse can only read from its config file is refused naming the key and
// saying so. gcsfuse 3.13.0 has no such key, so the table is swapped for one that does.
func TestConfigKeyWithoutFlag(t *testing.T) {
	savedFlags, savedPaths := byFlag, byConfigPath
	t.Cleanup(func() { byFlag, byConfigPath = savedFlags, savedPaths })
	byFlag, byConfigPath = buildPolicy([]gcsfuseParam{{ConfigPath: "write.secret-knob", Type: "int"}})
	_, err := Parse([]string{"write:secret-knob:3"})
	var oe *Error
	if !errors.As(err, &oe) || oe.Option != "write:secret-knob:3" || !strings.Contains(err.Error(), "no command-line flag in gcsfuse "+GCSFuseVersion) {
		t.Fatalf("err = %v, want an *Error naming write:secret-knob:3 and saying it has no flag", err)
	}
}

// The rules that decide nothing at 3.13.0 (every path and list param there is also owned or
// hidden) still hold for a param a later gcsfuse may add: checked on a made-up table.
func TestPolicyRulesOnNewParams(t *testing.T) {
	savedFlags, savedPaths := byFlag, byConfigPath
	t.Cleanup(func() { byFlag, byConfigPath = savedFlags, savedPaths })
	byFlag, byConfigPath = buildPolicy([]gcsfuseParam{
		{ConfigPath: "write.spill-dir", Flag: "spill-dir", Type: "resolvedPath"},
		{ConfigPath: "read.tags", Flag: "read-tags", Type: "[]string"},
		{ConfigPath: "read.shape", Flag: "read-shape", Type: "readShape"},
		{ConfigPath: "read.level", Flag: "read-level", Type: "int"},
	})
	for in, want := range map[string]string{
		"write:spill-dir:/etc": "path in the sidecar's file system",
		"read-tags=a":          "is a list",
		"read:shape:round":     `type "readShape", which this driver cannot check yet`,
		"read:level:x":         "takes a gcsfuse int",
	} {
		_, err := Parse([]string{in})
		var oe *Error
		if !errors.As(err, &oe) || oe.Option != in || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): err = %v, want an *Error naming it and saying %q", in, err, want)
		}
	}
	if res, err := Parse([]string{"read:level:-3"}); err != nil || !reflect.DeepEqual(res.Flags, []string{"--read-level=-3"}) {
		t.Errorf("Parse(read:level:-3) = %v, %v; want --read-level=-3", res, err)
	}
}
