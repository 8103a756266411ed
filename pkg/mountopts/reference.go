package mountopts

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Options is the policy's decision on every param of gcsfuse's table (gcsfuseParams, in its
// order) and on the driver-owned flags the table lacks (sorted), for the generated
// reference (hack/reference writes docs/reference.md from it). Flag is the flag without
// dashes ("" for a param only gcsfuse's config file sets), ConfigPath its config-file key
// ("metadata-cache.ttl-secs"; "" for a flag-only param), Type gcsfuse's type name. Exactly
// one of Accepts and Refused is set: Accepts says, in Markdown, which values a volume may
// give; Refused is why it may give none, as Parse's error says it.
func Options() []struct{ Flag, ConfigPath, Type, Accepts, Refused string } {
	var out []struct{ Flag, ConfigPath, Type, Accepts, Refused string }
	for _, p := range gcsfuseParams {
		o := decide(p)
		e := struct{ Flag, ConfigPath, Type, Accepts, Refused string }{Flag: p.Flag, ConfigPath: p.ConfigPath, Type: p.Type, Refused: o.refuse}
		if o.refuse == "" {
			e.Accepts = o.check.accepts(p.Flag)
		}
		out = append(out, e)
	}
	var extra []string
	for f := range owned {
		if byFlag[f] == nil {
			extra = append(extra, f)
		}
	}
	sort.Strings(extra)
	for _, f := range extra {
		out = append(out, struct{ Flag, ConfigPath, Type, Accepts, Refused string }{Flag: f, Refused: ownedReason})
	}
	return out
}

// accepts says in Markdown which values the check s lets through for the flag name (spec.flag).
func (s spec) accepts(name string) string {
	switch s.kind {
	case kBool:
		return "`true` or `false`; the name alone is `true`"
	case kInt:
		if s.min == anyInt.min && s.max == anyInt.max {
			return "an integer"
		}
		return fmt.Sprintf("an integer from %d to %d", int64(s.min), int64(s.max))
	case kFloat:
		if s.min == anyFloat.min && s.max == anyFloat.max {
			return "a number"
		}
		return fmt.Sprintf("a number from %g to %g", s.min, s.max)
	case kOctal:
		return "an octal permission of 3 or 4 digits, at most `0777` (`0644`)"
	case kDuration:
		return fmt.Sprintf("a duration from `0s` to `%s` (`30s`, `1m30s`)", time.Duration(s.max))
	case kEnum:
		if name == MetricsPortOption {
			return "`0` only: no metrics for this volume (the driver chooses the port otherwise)"
		}
		return "one of `" + strings.Join(s.enum, "`, `") + "`"
	case kString:
		return "a string of at most 1024 characters, not starting with `-`"
	case kPattern:
		return "a string matching `" + s.pattern.String() + "`, at most 1024 characters, not starting with `-`, without a `..` element"
	}
	return fmt.Sprintf("(kind %d)", s.kind)
}
