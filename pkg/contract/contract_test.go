package contract

import "testing"

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
