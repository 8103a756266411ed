package nodevolume

import "testing"

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
