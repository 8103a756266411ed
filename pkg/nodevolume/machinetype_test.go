package nodevolume

import (
	"slices"
	"testing"
)

// WithMachineType never writes into the caller's slice: the flags of one volume must not
// show up in another's.
func TestWithMachineTypeDoesNotAlias(t *testing.T) {
	base := make([]string, 1, 4)
	base[0] = "--implicit-dirs"
	a := WithMachineType(base, "a")
	b := WithMachineType(base, "b")
	if a[1] != "--machine-type=a" || b[1] != "--machine-type=b" || len(base) != 1 {
		t.Fatalf("a = %q, b = %q, base = %q", a, b, base)
	}
}

// WithoutMachineType leaves the caller's flags as they were: they are the published
// volume's, compared again at every republish.
func TestWithoutMachineTypeLeavesTheFlags(t *testing.T) {
	flags := []string{"--machine-type=n2", "--implicit-dirs"}
	got := WithoutMachineType(flags)
	if !slices.Equal(got, []string{"--implicit-dirs"}) || !slices.Equal(flags, []string{"--machine-type=n2", "--implicit-dirs"}) {
		t.Fatalf("WithoutMachineType = %q, caller's flags now %q", got, flags)
	}
}
