//go:build linux

package credentials

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

const uid, gid = 65534, 65534

func emptyDir(t *testing.T) (string, *os.File) { d, p := dirtest.EmptyDir(t); return p, d }

func checkOwned(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	dirtest.CheckOwned(t, p, uid, gid, mode)
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
	paths := podfiles.At(root)
	vol := paths.CredentialsDir("data")
	checkOwned(t, filepath.Dir(vol), 0o700)
	checkOwned(t, vol, 0o700)
	for name, want := range map[string][]byte{paths.CredentialsTokenFile("data"): p.Token, paths.CredentialsConfigFile("data"): p.Config} {
		checkOwned(t, name, 0o600)
		if got, _ := os.ReadFile(name); string(got) != string(want) {
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
	if got, _ := os.ReadFile(paths.CredentialsTokenFile("data")); string(got) != "new.token.value" {
		t.Errorf("token after refresh: %q", got)
	}
	entries, _ := os.ReadDir(vol)
	if len(entries) != 2 {
		t.Errorf("files left in %s: %v", vol, entries)
	}
	if err := podfiles.RemoveCredentials(dir, "data"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(vol); !os.IsNotExist(err) {
		t.Errorf("RemoveCredentials left %s: %v", vol, err)
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
	paths := podfiles.At(root)
	checkOwned(t, paths.CredentialsConfigFile("data"), 0o600)
	if _, err := os.Lstat(paths.CredentialsTokenFile("data")); !os.IsNotExist(err) {
		t.Errorf("a key volume got a token file: %v", err)
	}
	adc, err := build(Config{}, baseAttrs(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, "other", adc, uid, gid); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(paths.CredentialsDir("other")); !os.IsNotExist(err) {
		t.Errorf("ADC wrote files: %v", err)
	}
}
