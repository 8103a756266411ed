//go:build linux

package credentials

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

const uid, gid = 65534, 65534

func emptyDir(t *testing.T) (string, *os.File) {
	t.Helper()
	needs.Root(t)
	root := t.TempDir()
	if err := os.Chmod(root, 0o777); err != nil { // as the kubelet makes an emptyDir
		t.Fatal(err)
	}
	d, err := podpath.OpenDir(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return root, d
}

func checkOwned(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != uid || sys.Gid != gid || st.Mode().Perm() != mode || st.Mode()&os.ModeSymlink != 0 {
		t.Errorf("%s: uid %d gid %d mode %v, want %d %d %v", p, sys.Uid, sys.Gid, st.Mode(), uid, gid, mode)
	}
}

func TestWriteFederation(t *testing.T) {
	root, dir := emptyDir(t)
	p, err := build(Config{Provider: testProvider}, baseAttrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Write(dir, "data", p, uid, gid)
	if err != nil || !w.Token || !w.Config {
		t.Fatalf("Write = %+v, %v", w, err)
	}
	vol := filepath.Join(root, contract.CredentialsDir, "data")
	checkOwned(t, filepath.Join(root, contract.CredentialsDir), 0o700)
	checkOwned(t, vol, 0o700)
	for name, want := range map[string][]byte{contract.CredentialsTokenFile: p.Token, contract.CredentialsConfigFile: p.Config} {
		checkOwned(t, filepath.Join(vol, name), 0o600)
		if got, _ := os.ReadFile(filepath.Join(vol, name)); string(got) != string(want) {
			t.Errorf("%s holds %q", name, got)
		}
	}
	// The same plan again (a republish with the same token) writes nothing.
	if w, err := Write(dir, "data", p, uid, gid); err != nil || w.Token || w.Config {
		t.Fatalf("second Write = %+v, %v", w, err)
	}
	// A new token replaces the old one, atomically (no temp file left behind).
	attrs := baseAttrs()
	attrs[contract.CtxSATokens] = tokensAttr(contract.TokenAudience, "new.token.value")
	p2, err := build(Config{Provider: testProvider}, attrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := Write(dir, "data", p2, uid, gid); err != nil || !w.Token || w.Config {
		t.Fatalf("refresh Write = %+v, %v", w, err)
	}
	if got, _ := os.ReadFile(filepath.Join(vol, contract.CredentialsTokenFile)); string(got) != "new.token.value" {
		t.Errorf("token after refresh: %q", got)
	}
	entries, _ := os.ReadDir(vol)
	if len(entries) != 2 {
		t.Errorf("files left in %s: %v", vol, entries)
	}
	if err := Remove(dir, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(vol); !os.IsNotExist(err) {
		t.Errorf("Remove left %s: %v", vol, err)
	}
	if err := Remove(dir, "data"); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func TestWriteKeyAndADC(t *testing.T) {
	root, dir := emptyDir(t)
	p, err := build(Config{}, baseAttrs(), map[string]string{contract.SecretKeyServiceAccount: keyJSON(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, "data", p, uid, gid); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(root, contract.CredentialsDir, "data")
	checkOwned(t, filepath.Join(vol, contract.CredentialsConfigFile), 0o600)
	if _, err := os.Lstat(filepath.Join(vol, contract.CredentialsTokenFile)); !os.IsNotExist(err) {
		t.Errorf("a key volume got a token file: %v", err)
	}
	adc, err := build(Config{}, baseAttrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, "other", adc, uid, gid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, contract.CredentialsDir, "other")); !os.IsNotExist(err) {
		t.Errorf("ADC wrote files: %v", err)
	}
}

// TestWriteIsSymlinkSafe: a container of the pod that can write the emptyDir plants
// symlinks where the credentials go; nothing is written outside, and nothing is followed.
func TestWriteIsSymlinkSafe(t *testing.T) {
	p, err := build(Config{Provider: testProvider}, baseAttrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("credentials dir is a symlink", func(t *testing.T) {
		root, dir := emptyDir(t)
		if err := os.Symlink(outside, filepath.Join(root, contract.CredentialsDir)); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, "data", p, uid, gid); err == nil {
			t.Fatal("Write followed the symlinked credentials directory")
		}
	})
	t.Run("volume dir is a symlink", func(t *testing.T) {
		root, dir := emptyDir(t)
		if err := os.Mkdir(filepath.Join(root, contract.CredentialsDir), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(root, contract.CredentialsDir, "data")); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, "data", p, uid, gid); err == nil {
			t.Fatal("Write followed the symlinked volume directory")
		}
	})
	t.Run("token file is a symlink", func(t *testing.T) {
		root, dir := emptyDir(t)
		if _, err := Write(dir, "data", p, uid, gid); err != nil {
			t.Fatal(err)
		}
		tok := filepath.Join(root, contract.CredentialsDir, "data", contract.CredentialsTokenFile)
		if err := os.Remove(tok); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, tok); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, "data", p, uid, gid); err != nil {
			t.Fatal(err)
		}
		checkOwned(t, tok, 0o600)
	})
	t.Run("directory made by another user", func(t *testing.T) {
		root, dir := emptyDir(t)
		d := filepath.Join(root, contract.CredentialsDir)
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, "data", p, uid, gid); err == nil || !strings.Contains(err.Error(), "owned by uid 1000") {
			t.Fatalf("Write used a directory of uid 1000: %v", err)
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
// beside a key volume's files or alone (an ADC volume), and goes with them at unpublish.
func TestWriteCABundle(t *testing.T) {
	pemText := []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
	root, dir := emptyDir(t)
	vol := filepath.Join(root, contract.CredentialsDir, "data")
	if w, err := WriteCABundle(dir, "data", pemText, uid, gid); err != nil || !w {
		t.Fatalf("WriteCABundle = %v, %v", w, err)
	}
	ca := filepath.Join(vol, contract.CABundleFile)
	checkOwned(t, vol, 0o700)
	checkOwned(t, ca, 0o600)
	if got, _ := os.ReadFile(ca); string(got) != string(pemText) {
		t.Fatalf("ca.pem holds %q", got)
	}
	if w, err := WriteCABundle(dir, "data", pemText, uid, gid); err != nil || w {
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
	if _, err := WriteCABundle(dir, "data", pemText, uid, gid); err != nil {
		t.Fatal(err)
	}
	checkOwned(t, ca, 0o600)
	if b, _ := os.ReadFile(victim); string(b) != "host" {
		t.Fatalf("the host file was changed: %q", b)
	}
	if err := os.Symlink(outside, filepath.Join(root, contract.CredentialsDir, "other")); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteCABundle(dir, "other", pemText, uid, gid); err == nil {
		t.Fatal("WriteCABundle followed a symlinked volume directory")
	}
	if err := Remove(dir, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(vol); !os.IsNotExist(err) {
		t.Errorf("Remove left %s: %v", vol, err)
	}
}
