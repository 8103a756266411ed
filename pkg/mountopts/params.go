package mountopts

//go:generate go run ./gen -o gcsfuse_params.go

// gcsfuseParam is one entry of gcsfuse's own parameter list (cfg/params.yaml in its module)
// at GCSFuseVersion, as gcsfuse_params.go holds it. The policy in policy.go is derived from
// this table, so a flag gcsfuse gains or drops at a new version is decided on by the policy
// and its tests, not forgotten in a hand-written list.
type gcsfuseParam struct {
	// ConfigPath is the param's place in gcsfuse's config file, dot-separated
	// ("metadata-cache.stat-cache-max-size-mb"); empty for flag-only params.
	ConfigPath string
	// Flag is the command-line flag without dashes ("stat-cache-max-size-mb"); empty for a
	// param that only the config file can set.
	Flag string
	// Type is params.yaml's type name: bool, int, float64, string, duration, octal,
	// resolvedPath, []string, or a gcsfuse enum type (logSeverity, protocol, ...).
	Type string
	// Hidden is params.yaml's hide-flag: left out of gcsfuse's help (internal or experimental).
	Hidden bool
	// Deprecated is params.yaml's deprecation warning for a deprecated param, else empty.
	Deprecated string
}
