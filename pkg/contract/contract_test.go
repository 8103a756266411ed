package contract

import (
	"strings"
	"testing"
)

// The driver name is part of host paths and of the kubelet's registration: only the two
// names the driver may be installed under are accepted.
func TestValidateDriverName(t *testing.T) {
	for _, ok := range []string{DriverName, IncumbentDriverName} {
		if err := ValidateDriverName(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "efs.csi.aws.com", "gcsfuse.csi.storage/../x", "GCSFUSE.CSI.STORAGE"} {
		if err := ValidateDriverName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestValidVolumeName(t *testing.T) {
	for name, want := range map[string]bool{
		"data": true, "a": true, "vol-1": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a/b": false, "..": false,
		strings.Repeat("a", 64): false, "a b": false,
		// PersistentVolume names are DNS-1123 subdomains: the kubelet names the volume's
		// directory after them (the storage suite's PVs are "gcsfuse.csi.storage-xxxxx").
		"a.b": true, "gcsfuse.csi.storage-fkkcb": true, "pv-1.team": true,
		".": false, "a..b": false, ".a": false, "a.": false, "a.-b": false, "a-.b": false,
		strings.Repeat("a.", 31) + "b": true, strings.Repeat("a.", 32): false,
	} {
		if got := ValidVolumeName(name); got != want {
			t.Errorf("ValidVolumeName(%q) = %v, want %v", name, got, want)
		}
	}
}
