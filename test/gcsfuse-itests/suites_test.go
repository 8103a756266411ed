package main

import (
	"reflect"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
)

// Every suite's options must be mountOptions the driver accepts: the mounted mode mounts a
// pod's volume with exactly what `flags` prints.
func TestSuiteOptionsPassTheDriver(t *testing.T) {
	for _, s := range suites {
		res, err := mountopts.Parse(s.Options)
		if err != nil {
			t.Errorf("%s: the driver refuses mountOptions %q: %v", s.Name, s.MountOptions(), err)
			continue
		}
		if res.ReadOnly != s.ReadOnly() {
			t.Errorf("%s: the driver reads ro=%v from %q, the suite %v", s.Name, res.ReadOnly, s.MountOptions(), s.ReadOnly())
		}
	}
}

// The default set is issue 28's list of packages, each suite well formed.
func TestSuitesCoverTheIssuesPackages(t *testing.T) {
	want := []string{"operations", "implicit_dir", "explicit_dir", "list_large_dir", "read_large_files",
		"write_large_files", "rename_dir_limit", "local_file", "streaming_writes", "readonly", "concurrent_operations"}
	if got := packages(); !reflect.DeepEqual(got, want) {
		t.Errorf("packages() = %q, want %q", got, want)
	}
	names := map[string]bool{}
	for _, s := range suites {
		if names[s.Name] {
			t.Errorf("suite %s twice", s.Name)
		}
		names[s.Name] = true
		if s.Timeout <= 0 {
			t.Errorf("%s: no timeout", s.Name)
		}
		if (s.Skip == "") != (s.SkipWhy == "") {
			t.Errorf("%s: a -test.skip needs its reason and a reason its pattern", s.Name)
		}
		if len(bucketFor(s)) > 63 {
			t.Errorf("%s: bucket name %s is longer than GCS allows", s.Name, bucketFor(s))
		}
	}
}

func TestSelectSuites(t *testing.T) {
	ss, err := selectSuites([]string{"list_large_dir", "readonly"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range ss {
		got = append(got, s.Name)
	}
	want := []string{"list_large_dir", "readonly"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := selectSuites([]string{"gzip"}); err == nil {
		t.Error("an unknown package was accepted")
	}
	all, _ := selectSuites(nil)
	for _, s := range all {
		if s.Optional != "" {
			t.Errorf("the default set has the optional %s", s.Name)
		}
	}
	if opt, err := selectSuites([]string{"list_large_dir/all"}); err != nil || len(opt) != 1 || opt[0].Optional == "" {
		t.Errorf("naming an optional suite: %v, %v", opt, err)
	}
}

func TestGcsfuseArgs(t *testing.T) {
	s := Suite{Options: []string{"ro", "implicit-dirs", "rename-dir-limit=3"}}
	want := []string{"-o", "ro", "--implicit-dirs", "--rename-dir-limit=3"}
	if got := s.GcsfuseArgs(); !reflect.DeepEqual(got, want) {
		t.Errorf("GcsfuseArgs() = %q, want %q", got, want)
	}
	if !s.ReadOnly() || s.MountOptions() != "ro,implicit-dirs,rename-dir-limit=3" {
		t.Errorf("ReadOnly %v, MountOptions %q", s.ReadOnly(), s.MountOptions())
	}
}
