package podfiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
)

const sidecarUID, sidecarGID = 65534, 65534

// emptyDir is a pinned directory made as the kubelet makes an emptyDir (0777, root's).
func emptyDir(t *testing.T) (string, *os.File) { d, p := dirtest.EmptyDir(t); return p, d }

func checkOwned(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	dirtest.CheckOwned(t, p, sidecarUID, sidecarGID, mode)
}

func writeCredentials(tmp *os.File, volume string, token, config []byte) error {
	d, err := OpenCredentialsDir(tmp, volume, sidecarUID, sidecarGID)
	if err != nil {
		return err
	}
	defer d.Close()
	if _, err := d.WriteToken(token); err != nil {
		return err
	}
	_, err = d.WriteConfig(config)
	return err
}

// TestCredentialsDir: both directories 0700 and the files 0600, all the sidecar's; a file
// already holding the same bytes is left alone; a new one replaces it atomically; Remove
// takes everything of the volume.
func TestCredentialsDir(t *testing.T) {
	root, tmp := emptyDir(t)
	paths := At(root)
	d, err := OpenCredentialsDir(tmp, "data", sidecarUID, sidecarGID)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := d.WriteToken([]byte("tok")); err != nil || !w {
		t.Fatalf("WriteToken = %v, %v", w, err)
	}
	if w, err := d.WriteConfig([]byte("{}")); err != nil || !w {
		t.Fatalf("WriteConfig = %v, %v", w, err)
	}
	if w, err := d.WriteToken([]byte("tok")); err != nil || w {
		t.Fatalf("same token again = %v, %v", w, err)
	}
	if w, err := d.WriteToken([]byte("new")); err != nil || !w {
		t.Fatalf("new token = %v, %v", w, err)
	}
	d.Close()
	vol := paths.CredentialsDir("data")
	checkOwned(t, filepath.Dir(vol), 0o700)
	checkOwned(t, vol, 0o700)
	for p, want := range map[string]string{paths.CredentialsTokenFile("data"): "new", paths.CredentialsConfigFile("data"): "{}"} {
		checkOwned(t, p, 0o600)
		if got, _ := os.ReadFile(p); string(got) != want {
			t.Errorf("%s holds %q, want %q", p, got, want)
		}
	}
	if entries, _ := os.ReadDir(vol); len(entries) != 2 {
		t.Errorf("files left in %s: %v", vol, entries)
	}
	if err := RemoveCredentials(tmp, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(vol); !os.IsNotExist(err) {
		t.Errorf("RemoveCredentials left %s: %v", vol, err)
	}
	if err := RemoveCredentials(tmp, "data"); err != nil {
		t.Errorf("second RemoveCredentials: %v", err)
	}
}

// TestCredentialsDirIsSymlinkSafe: a container of the pod that can write the emptyDir
// plants symlinks where the credentials go; nothing is written outside, nothing is followed.
func TestCredentialsDirIsSymlinkSafe(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("credentials dir is a symlink", func(t *testing.T) {
		root, tmp := emptyDir(t)
		if err := os.Symlink(outside, filepath.Dir(At(root).CredentialsDir("data"))); err != nil {
			t.Fatal(err)
		}
		if err := writeCredentials(tmp, "data", []byte("t"), []byte("c")); err == nil {
			t.Fatal("followed the symlinked credentials directory")
		}
	})
	t.Run("volume dir is a symlink", func(t *testing.T) {
		root, tmp := emptyDir(t)
		vol := At(root).CredentialsDir("data")
		if err := os.Mkdir(filepath.Dir(vol), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, vol); err != nil {
			t.Fatal(err)
		}
		if err := writeCredentials(tmp, "data", []byte("t"), []byte("c")); err == nil {
			t.Fatal("followed the symlinked volume directory")
		}
		if err := RemoveCredentials(tmp, "data"); err == nil {
			t.Fatal("RemoveCredentials followed the symlinked volume directory")
		}
	})
	t.Run("token file is a symlink", func(t *testing.T) {
		root, tmp := emptyDir(t)
		if err := writeCredentials(tmp, "data", []byte("t"), []byte("c")); err != nil {
			t.Fatal(err)
		}
		tok := At(root).CredentialsTokenFile("data")
		if err := os.Remove(tok); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, tok); err != nil {
			t.Fatal(err)
		}
		if err := writeCredentials(tmp, "data", []byte("t"), []byte("c")); err != nil {
			t.Fatal(err)
		}
		checkOwned(t, tok, 0o600)
	})
	t.Run("directory made by another user", func(t *testing.T) {
		root, tmp := emptyDir(t)
		d := filepath.Dir(At(root).CredentialsDir("data"))
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		if err := writeCredentials(tmp, "data", []byte("t"), []byte("c")); err == nil || !strings.Contains(err.Error(), "owned by uid 1000") {
			t.Fatalf("used a directory of uid 1000: %v", err)
		}
	})
	if b, _ := os.ReadFile(victim); string(b) != "host" {
		t.Fatalf("the host file was changed: %q", b)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("files appeared outside the emptyDir: %v", entries)
	}
}

// TestWriteCABundle: the extra CA bundle lands next to the volume's credentials with their
// guarantees (owned by the sidecar, 0600, atomic, a planted symlink replaced, not followed),
// and goes with them at unpublish.
func TestWriteCABundle(t *testing.T) {
	pemText := []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	root, dir := emptyDir(t)
	vol := At(root).CredentialsDir("data")
	if w, err := WriteCABundle(dir, "data", pemText, sidecarUID, sidecarGID); err != nil || !w {
		t.Fatalf("WriteCABundle = %v, %v", w, err)
	}
	ca := At(root).CABundleFile("data")
	checkOwned(t, vol, 0o700)
	checkOwned(t, ca, 0o600)
	if got, _ := os.ReadFile(ca); string(got) != string(pemText) {
		t.Fatalf("ca.pem holds %q", got)
	}
	if w, err := WriteCABundle(dir, "data", pemText, sidecarUID, sidecarGID); err != nil || w {
		t.Fatalf("same bundle again = %v, %v", w, err)
	}
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ca); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, ca); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteCABundle(dir, "data", pemText, sidecarUID, sidecarGID); err != nil {
		t.Fatal(err)
	}
	checkOwned(t, ca, 0o600)
	if b, _ := os.ReadFile(victim); string(b) != "host" {
		t.Fatalf("the host file was changed: %q", b)
	}
	if err := os.Symlink(outside, At(root).CredentialsDir("other")); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteCABundle(dir, "other", pemText, sidecarUID, sidecarGID); err == nil {
		t.Fatal("WriteCABundle followed a symlinked volume directory")
	}
	if err := RemoveCredentials(dir, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(vol); !os.IsNotExist(err) {
		t.Errorf("RemoveCredentials left %s: %v", vol, err)
	}
}
