package podfiles

import "testing"

// The names on disk are shared by node plugins and sidecars of different releases (an
// upgraded node plugin offers to a sidecar injected before the upgrade): they never change.
func TestLayoutNamesOnDisk(t *testing.T) {
	p := At("/gcsfuse-tmp")
	for _, tt := range []struct{ got, want string }{
		{p.HandoffDir(), "/gcsfuse-tmp/handoff"},
		{p.HandoffSocket("data"), "/gcsfuse-tmp/handoff/data.sock"},
		{HandoffSocketName("data"), "data.sock"},
		{PendingHandoffSocketName("data"), ".data.sock.pending"},
		{p.ExitFile(), "/gcsfuse-tmp/exit"},
		{p.TerminatingFile(), "/gcsfuse-tmp/terminating"},
		{p.InitDoneFile(), "/gcsfuse-tmp/init-done"},
		{p.MetricsSocket(), "/gcsfuse-tmp/metrics.sock"},
		{p.CredentialsDir("data"), "/gcsfuse-tmp/credentials/data"},
		{p.CredentialsConfigFile("data"), "/gcsfuse-tmp/credentials/data/credentials.json"},
		{p.CredentialsTokenFile("data"), "/gcsfuse-tmp/credentials/data/token"},
		{p.CABundleFile("data"), "/gcsfuse-tmp/credentials/data/ca.pem"},
		{p.VolumeDir("data"), "/gcsfuse-tmp/volumes/data"},
		{p.TakenFile("data"), "/gcsfuse-tmp/volumes/data/taken"},
		{p.CombinedCAFile("data"), "/gcsfuse-tmp/volumes/data/ca-certificates.crt"},
		{p.VolumeTempDir("data"), "/gcsfuse-tmp/volumes/data/tmp"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
}
