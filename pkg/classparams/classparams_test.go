package classparams

import (
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestParse(t *testing.T) {
	c, err := Parse(map[string]string{"bucketName": "data", "pathPrefix": "/claims/", "mountOptions": "implicit-dirs", "fileCacheCapacity": "1Gi"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Bucket != "data" || c.PathPrefix != "claims" || c.Dir("pvc-1") != "claims/pvc-1" {
		t.Fatalf("got %+v, dir %q", c, c.Dir("pvc-1"))
	}
	attrs := c.VolumeAttributes(c.Dir("pvc-1"))
	if attrs[contract.AttrMountOptions] != "implicit-dirs,only-dir=claims/pvc-1" || attrs["fileCacheCapacity"] != "1Gi" || attrs["bucketName"] != "data" {
		t.Fatalf("attributes %v", attrs)
	}
	if _, ok := attrs[ParamPathPrefix]; ok {
		t.Fatalf("pathPrefix is the provisioner's, not a volume attribute: %v", attrs)
	}
	if c.Attributes[contract.AttrMountOptions] != "implicit-dirs" {
		t.Fatalf("the class's attributes changed: %v", c.Attributes)
	}
	root, err := Parse(map[string]string{"bucketName": "data"})
	if err != nil || root.Dir("pvc-2") != "pvc-2" || root.VolumeAttributes("pvc-2")[contract.AttrMountOptions] != "only-dir=pvc-2" {
		t.Fatalf("root class: %+v, %v", root, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		params  map[string]string
		wantErr string
	}{
		{"no bucket", map[string]string{"pathPrefix": "x"}, "bucketName is required"},
		{"bad bucket", map[string]string{"bucketName": "Bad_Bucket!"}, "bucket"},
		{"unknown parameter", map[string]string{"bucketName": "data", "bukcetName": "x"}, `unknown volume attribute "bukcetName"`},
		{"only-dir given", map[string]string{"bucketName": "data", "mountOptions": "only-dir=a"}, "given more than once"},
		{"bad option", map[string]string{"bucketName": "data", "mountOptions": "no-such-flag"}, "no-such-flag"},
		{"prefix escapes", map[string]string{"bucketName": "data", "pathPrefix": "a/../b"}, "without . or .."},
		{"prefix empty element", map[string]string{"bucketName": "data", "pathPrefix": "a//b"}, "without . or .."},
		{"prefix bad char", map[string]string{"bucketName": "data", "pathPrefix": "a b"}, "pathPrefix"},
		{"secret", map[string]string{"bucketName": "data", "csi.storage.k8s.io/provisioner-secret-name": "s"}, "reads no secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.params)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Parse(%v) = %v, want an error containing %q", tc.params, err, tc.wantErr)
			}
		})
	}
}
