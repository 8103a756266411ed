package main

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// ---- mount options --------------------------------------------------------------------

// kernelOptions are the options mountopts.Parse handles itself, not gcsfuse's: an example,
// a value it refuses (its reason says what it takes) and what the option is.
var kernelOptions = map[string]struct{ example, bad, what string }{
	"ro":            {"ro", "ro=true", "mounts read-only"},
	"rw":            {"rw", "rw=1", "mounts read-write (the default); not with `ro`"},
	"read_ahead_kb": {"read_ahead_kb=1024", "read_ahead_kb=1MiB", "the kernel's read-ahead of the mount, in KiB"},
	"noexec":        {"noexec", "noexec=1", "the kernel mount flag"},
	"noatime":       {"noatime", "noatime=1", "the kernel mount flag"},
	"nodev":         {"nodev", "nodev=1", "always applied; accepted for manifests that name it"},
	"nosuid":        {"nosuid", "nosuid=1", "always applied; accepted for manifests that name it"},
}

func (g *gen) mountOptions() error {
	names, err := switchCases(filepath.Join(g.root, "pkg", "mountopts"), "Parse", "name")
	if err != nil {
		return err
	}
	have := slices.Collect(maps.Keys(kernelOptions))
	if err := differ("the options mountopts.Parse handles itself (its switch on name)", names, have); err != nil {
		return err
	}
	g.p("")
	g.p("## Mount options")
	g.p("")
	g.p("A PersistentVolume's `spec.mountOptions` (a StorageClass's `mountOptions` become them) and the")
	g.p("`" + contract.AttrMountOptions + "` volume attribute, comma separated. Each is `name`, `name=value` (`name` a gcsfuse")
	g.p("flag without its dashes) or gcsfuse's config-file form `section:key:value`")
	g.p("(`metadata-cache:ttl-secs:60`), which becomes the flag gcsfuse's table gives that key.")
	g.p("An option not accepted below, given twice (in either form), or holding whitespace fails the")
	g.p("mount (InvalidArgument) with a message naming it.")
	g.p("")
	g.header("option", "example", "the code reads it as", "a value it refuses", "what it is")
	for _, n := range names {
		k := kernelOptions[n]
		res, err := mountopts.Parse([]string{k.example})
		if err != nil {
			return fmt.Errorf("kernel option example %q: %w", k.example, err)
		}
		_, err = mountopts.Parse([]string{k.bad})
		var oe *mountopts.Error
		if !errors.As(err, &oe) {
			return fmt.Errorf("kernel option %q: Parse accepted %q", n, k.bad)
		}
		g.row(code(n), code(k.example), readResult(res), code(k.bad)+": "+md(oe.Reason), k.what)
	}

	var accepted, refusedOpts []struct{ Flag, ConfigPath, Type, Accepts, Refused string }
	for _, o := range mountopts.Options() {
		if o.Refused == "" {
			accepted = append(accepted, o)
		} else {
			refusedOpts = append(refusedOpts, o)
		}
	}
	byName := func(list []struct{ Flag, ConfigPath, Type, Accepts, Refused string }) {
		sort.Slice(list, func(i, j int) bool { return optionName(list[i]) < optionName(list[j]) })
	}
	byName(accepted)
	byName(refusedOpts)
	g.p("")
	g.p("### gcsfuse options a volume may set")
	g.p("")
	g.p(fmt.Sprintf("From gcsfuse %s's own parameter table, through the driver's policy: %d accepted, %d refused.", mountopts.GCSFuseVersion, len(accepted), len(refusedOpts)))
	g.p("")
	g.header("option", "config-file key", "gcsfuse type", "values")
	for _, o := range accepted {
		g.row(code(o.Flag), codeOrNone(strings.ReplaceAll(o.ConfigPath, ".", ":")), code(o.Type), o.Accepts)
	}
	g.p("")
	g.p("### gcsfuse options a volume may not set")
	g.p("")
	g.header("option", "config-file key", "why")
	for _, o := range refusedOpts {
		g.row(codeOrNone(o.Flag), codeOrNone(strings.ReplaceAll(o.ConfigPath, ".", ":")), md(o.Refused))
	}
	return nil
}

func optionName(o struct{ Flag, ConfigPath, Type, Accepts, Refused string }) string {
	if o.Flag != "" {
		return o.Flag
	}
	return o.ConfigPath
}

func readResult(r *mountopts.Result) string {
	var parts []string
	if r.ReadOnly {
		parts = append(parts, "read-only")
	}
	if r.NoExec {
		parts = append(parts, code("noexec"))
	}
	if r.NoAtime {
		parts = append(parts, code("noatime"))
	}
	if r.ReadAheadKB != nil {
		parts = append(parts, fmt.Sprintf("read-ahead %d KiB", *r.ReadAheadKB))
	}
	if len(r.Flags) > 0 {
		parts = append(parts, flags(r.Flags))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}
