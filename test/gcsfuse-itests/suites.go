package main

import (
	"fmt"
	"strings"
	"time"
)

// Suite is one run of one of gcsfuse's integration test packages against one mount: the
// package's test binary in --mountedDirectory mode, the mount made with Options. A package
// whose tests want different mounts (upstream's test_config.yaml gives each top-level test
// its own flag sets, and its GKE runs pass `-run` accordingly) has one suite per mount.
type Suite struct {
	// Name is the package, or package/variant when the package has several suites.
	Name string
	// Package is the directory under tools/integration_tests.
	Package string
	// Options are the mount's options as the driver's mountOptions take them (gcsfuse flag
	// names without dashes, "ro" for a read-only mount): `flags` prints them for the caller of
	// the mounted mode, and the standalone mode turns them into gcsfuse's command line.
	Options []string
	// Run and Skip are the -test.run and -test.skip patterns ("" for none).
	Run, Skip string
	// SkipWhy says why Skip leaves those tests out; it is recorded with the results, so that
	// no test goes missing silently.
	SkipWhy string
	// Timeout bounds the binary (-test.timeout; the runner kills it a minute later).
	Timeout time.Duration
	// Optional, when set, keeps the suite out of the default set and says why; naming it
	// runs it.
	Optional string
	// Needs are the commands the tests run besides bash, cp and mv (on this host's PATH).
	Needs []string
}

// suites is the default set: for each package, upstream's flag set for a flat bucket over
// HTTP (tools/integration_tests/test_config.yaml: an entry compatible with "flat", for the
// tests its "run" names, as the GKE driver's e2e suite mounts them), narrowed to what this
// driver's mountOptions accept (TestSuiteOptionsPassTheDriver), one mount each.
//
// Left out of upstream's flag sets, on purpose:
//   - --client-protocol=grpc: fake-gcs-server's gRPC server speaks the retired
//     google.storage.v1 API, not the v2 one gcsfuse's gRPC client uses (and the project's
//     emulator serves HTTP only), so those runs would only measure the emulator;
//   - the Rapid (zonal) and HNS variants (TestOperationsRapidWritesEnabled,
//     TestImplicitDirRapidWritesEnabled): they need Rapid storage and the Storage Control
//     API's folder operations, which nothing here serves (the control plane answers every
//     bucket as flat); -test.run below names the tests upstream runs on flat buckets;
//   - hidden gcsfuse flags (--write-block-size-mb, --write-max-blocks-per-file): the driver
//     refuses them in mountOptions (pkg/mountopts: internal or experimental), so a pod could
//     not be mounted with them; the suites that upstream runs with them run with the
//     defaults instead, and say so.
//
// The emulator serves objects.move (test/internal/emulator), gcsfuse's rename: without it
// every rename failed, 29 tests of this set.
var suites = []Suite{
	{Name: "operations", Package: "operations",
		// TestOperationsBase's second flat/http1 flag set (the first,
		// --metadata-cache-ttl-secs=0 --enable-streaming-writes=false, runs without implicit
		// directories).
		Options: []string{"implicit-dirs", "kernel-list-cache-ttl-secs=-1", "enable-metadata-prefetch", "client-protocol=http1"},
		Run:     "^TestOperationsBase$", Timeout: 5 * time.Minute},
	{Name: "implicit_dir", Package: "implicit_dir",
		Options: []string{"implicit-dirs", "client-protocol=http1"},
		Run:     "^TestImplicitDirBase$", Timeout: 5 * time.Minute},
	{Name: "explicit_dir", Package: "explicit_dir",
		Options: []string{"implicit-dirs=false", "client-protocol=http1"},
		Timeout: 5 * time.Minute},
	{Name: "list_large_dir", Package: "list_large_dir",
		// --stat-cache-ttl=0 of upstream's flag set is deprecated and the driver refuses it;
		// --metadata-cache-ttl-secs=0 is what gcsfuse makes of it.
		Options: []string{"implicit-dirs", "metadata-cache-ttl-secs=0", "kernel-list-cache-ttl-secs=-1", "client-protocol=http1"},
		// One of its three tests: each uploads 12,000 objects through the storage API, and
		// fake-gcs-server's in-memory bucket scans all its objects on every insert, so the
		// first upload alone takes 1 to 3 minutes here and the next two (into the same bucket,
		// 24,000 and 36,000 objects) four and nine times that. list_large_dir/all runs them.
		Run: "^TestListLargeDirWithKernelListCache$/^TestListDirectoryWithTwelveThousandFiles$", Timeout: 10 * time.Minute},
	{Name: "list_large_dir/all", Package: "list_large_dir",
		Options: []string{"implicit-dirs", "metadata-cache-ttl-secs=0", "kernel-list-cache-ttl-secs=-1", "client-protocol=http1"},
		Run:     "^TestListLargeDirWithKernelListCache$", Timeout: 45 * time.Minute,
		Optional: "three uploads of 12,000 objects into one bucket: tens of minutes against fake-gcs-server (see list_large_dir)"},
	{Name: "list_large_dir/no-kernel-list-cache", Package: "list_large_dir",
		Options: []string{"enable-metadata-prefetch", "implicit-dirs", "client-protocol=http1"},
		Run:     "^TestListLargeDirWithoutKernelListCache$/^TestListDirectoryWithTwelveThousandFiles$", Timeout: 10 * time.Minute,
		Optional: "the same 12,000-object upload again (1 to 3 minutes) for gcsfuse's listing without the kernel's list cache, which the driver does not touch"},
	{Name: "read_large_files", Package: "read_large_files",
		Options: []string{"implicit-dirs", "client-protocol=http1"},
		Skip:    "^TestReadFilesConcurrently$",
		SkipWhy: "writes three 500 MiB files at once (55 s here), and fails or passes by the machine's load: fake-gcs-server hashes a resumable upload's whole content again at each chunk, so under that load a chunk outlasts gcsfuse's 10 s chunk timeout, gcsfuse sends it again, and fake-gcs-server, which appends every chunk whatever its Content-Range, stores it twice (\"could not upload entire data, expected size 524288000, got 557842432\": EIO on close); read_large_files/concurrent runs it",
		Timeout: 10 * time.Minute},
	{Name: "read_large_files/concurrent", Package: "read_large_files",
		Options: []string{"implicit-dirs", "client-protocol=http1"},
		Run:     "^TestReadFilesConcurrently$", Timeout: 10 * time.Minute,
		Optional: "fails by the machine's load against fake-gcs-server (see read_large_files)"},
	{Name: "write_large_files", Package: "write_large_files",
		// The first flat/http1 flag set: without streaming writes gcsfuse stages each file
		// whole in its --temp-dir, which the driver puts in the pod's emptyDir: 500 MiB files
		// through it. (The other set needs --write-max-blocks-per-file, hidden.)
		Options: []string{"enable-streaming-writes=false", "client-protocol=http1"},
		Skip:    "^(TestSlowWriteToFile|TestWriteMultipleFilesConcurrently)$",
		SkipWhy: "TestSlowWriteToFile sleeps 80 s (two 40 s pauses between 33 MiB writes, to outlast GCS's 32 s chunk retry deadline): gcsfuse's upload deadline against GCS, which neither the emulator nor the driver changes, at a third of the whole set's time (write_large_files/slow runs it); " +
			"TestWriteMultipleFilesConcurrently uploads three 500 MiB files at once, and fails or passes by the machine's load as read_large_files' TestReadFilesConcurrently does (here: \"stale file handle\" on close, the final chunk's retry answered 404 by an upload fake-gcs-server had committed; write_large_files/concurrent runs it)",
		Timeout: 10 * time.Minute},
	{Name: "write_large_files/concurrent", Package: "write_large_files",
		Options: []string{"enable-streaming-writes=false", "client-protocol=http1"},
		Run:     "^TestWriteMultipleFilesConcurrently$", Timeout: 10 * time.Minute,
		Optional: "fails by the machine's load against fake-gcs-server (see write_large_files)"},
	{Name: "write_large_files/slow", Package: "write_large_files",
		Options: []string{"enable-streaming-writes=false", "client-protocol=http1"},
		Run:     "^TestSlowWriteToFile$", Timeout: 5 * time.Minute,
		Optional: "80 s of sleeps (see write_large_files)"},
	{Name: "rename_dir_limit", Package: "rename_dir_limit",
		Options: []string{"rename-dir-limit=3", "client-protocol=http1"},
		// It renames a directory over an existing one with Python's os.rename.
		Needs:   []string{"python3"},
		Timeout: 5 * time.Minute},
	{Name: "local_file", Package: "local_file",
		Options: []string{"implicit-dirs", "rename-dir-limit=3", "enable-streaming-writes=false", "client-protocol=http1"},
		Timeout: 5 * time.Minute},
	{Name: "streaming_writes", Package: "streaming_writes",
		// Upstream adds --write-block-size-mb=1 --write-max-blocks-per-file=2 (hidden: the
		// driver refuses them), so these run with gcsfuse's default 32 MiB blocks.
		Options: []string{"rename-dir-limit=3", "write-global-max-blocks=-1", "client-protocol=http1"},
		Skip:    "^TestWritesWithDifferentConfig$",
		SkipWhy: "mounts gcsfuse itself, five times with other --write-block-size-mb flags; against a mounted directory it skips itself without a word",
		Timeout: 5 * time.Minute},
	{Name: "readonly", Package: "readonly",
		// The -o ro flag set (mountOptions ro: a read-only mount). The other one
		// (--file-mode=544 --dir-mode=544) proves refusals only for a non-root user; these
		// tests run as root on the host.
		Options: []string{"ro", "implicit-dirs", "client-protocol=http1"},
		Timeout: 5 * time.Minute},
	{Name: "concurrent_operations/read", Package: "concurrent_operations",
		Options: []string{"client-protocol=http1"},
		Run:     "^TestConcurrentRead$", Timeout: 5 * time.Minute},
	{Name: "concurrent_operations/listing", Package: "concurrent_operations",
		Options: []string{"kernel-list-cache-ttl-secs=-1", "client-protocol=http1"},
		Run:     "^TestConcurrentListing$", Timeout: 5 * time.Minute},
}

// packages are the test packages the suites need, in order, each once.
func packages() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range suites {
		if !seen[s.Package] {
			seen[s.Package] = true
			out = append(out, s.Package)
		}
	}
	return out
}

// defaultSuites are the suites that are not Optional.
func defaultSuites() []Suite {
	var out []Suite
	for _, s := range suites {
		if s.Optional == "" {
			out = append(out, s)
		}
	}
	return out
}

// selectSuites returns the suites named: a suite by its name, or a package's default suites
// by the package's; the default set for an empty list.
func selectSuites(names []string) ([]Suite, error) {
	if len(names) == 0 {
		return defaultSuites(), nil
	}
	var out []Suite
	for _, n := range names {
		found := false
		for _, s := range suites {
			if s.Name == n || (s.Package == n && s.Optional == "") {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("no suite or package %q (see the list subcommand)", n)
		}
	}
	return out, nil
}

// MountOptions is the driver's mountOptions string of the suite.
func (s Suite) MountOptions() string { return strings.Join(s.Options, ",") }

// GcsfuseArgs are the suite's options as gcsfuse's command line takes them.
func (s Suite) GcsfuseArgs() []string {
	var args []string
	for _, o := range s.Options {
		if o == "ro" {
			args = append(args, "-o", "ro")
			continue
		}
		args = append(args, "--"+o)
	}
	return args
}

// ReadOnly reports whether the suite's mount is read-only.
func (s Suite) ReadOnly() bool {
	for _, o := range s.Options {
		if o == "ro" {
			return true
		}
	}
	return false
}
