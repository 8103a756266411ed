package mountopts

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Explain accepts and refuses exactly what FromAttributes does, with its words, and says
// what each input read in another form became: the handle's bucket, config-form options,
// the GKE driver's attributes (those that ask for nothing, with why).
func TestExplain(t *testing.T) {
	for _, tt := range []struct {
		name   string
		attrs  map[string]string
		flags  []string
		handle string
		want   []string
	}{
		{name: "nothing to map", attrs: map[string]string{contract.AttrBucketName: "bkt", contract.AttrMountOptions: "implicit-dirs"}},
		{name: "handle with a suffix", handle: "bkt:data", want: []string{"volumeHandle bkt:data -> bucket bkt"}},
		{name: "bucketName wins over the handle", attrs: map[string]string{contract.AttrBucketName: "bkt"}, handle: "other:data"},
		{name: "config forms, in order", attrs: map[string]string{contract.AttrBucketName: "bkt", contract.AttrMountOptions: "logging:severity:info"},
			flags: []string{"metadata-cache:ttl-secs:-1,uid=1000"},
			want:  []string{"mount option metadata-cache:ttl-secs:-1 -> --metadata-cache-ttl-secs=-1", "mount option logging:severity:info -> --log-severity=info"}},
		{name: "GKE attributes, sorted", attrs: map[string]string{contract.AttrBucketName: "bkt", "metadataStatCacheCapacity": "32Mi",
			"disableMetrics": "true", "skipCSIBucketAccessCheck": "false", "multiNICIndex": "-1"},
			want: []string{"disableMetrics=true -> --prometheus-port=0", "metadataStatCacheCapacity=32Mi -> --stat-cache-max-size-mb=32",
				"multiNICIndex=-1 -> nothing (a negative index binds no NIC)",
				"skipCSIBucketAccessCheck=false -> nothing (this driver makes no bucket access check at mount)"}},
		{name: "refused", attrs: map[string]string{contract.AttrBucketName: "bkt", "multiNICIndex": "0"}},
		{name: "refused option", attrs: map[string]string{contract.AttrBucketName: "bkt"}, flags: []string{"debug_fuse"}},
		{name: "refused handle", handle: "bkt:a/b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := FromAttributes(tt.attrs, tt.flags, tt.handle)
			v, mappings, err := Explain(tt.attrs, tt.flags, tt.handle)
			if wantErr != nil {
				if err == nil || err.Error() != wantErr.Error() {
					t.Fatalf("Explain: %v, want FromAttributes' error %v", err, wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(v, want) {
				t.Fatalf("Explain: %+v, %v; want FromAttributes' %+v", v, err, want)
			}
			var got []string
			for _, m := range mappings {
				got = append(got, m.String())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("mappings %q, want %q", got, tt.want)
			}
		})
	}
}

// Every GKE driver attribute that can ask for nothing says why it is accepted anyway.
func TestIncumbentNoopsExplained(t *testing.T) {
	for name, alias := range incumbentAttrs {
		for _, v := range []string{"false", "-1", "0"} {
			if opts, err := alias(v); err == nil && len(opts) == 0 && incumbentNoops[name] == "" {
				t.Errorf("%s=%s asks for nothing and incumbentNoops does not say why", name, v)
			}
		}
	}
}

// CheckAccessType takes a FUSE file system mount only, with NodePublishVolume's words.
func TestCheckAccessType(t *testing.T) {
	for _, fs := range []string{"", "fuse", "gcsfuse"} {
		if err := CheckAccessType(false, fs); err != nil {
			t.Errorf("fsType %q: %v", fs, err)
		}
	}
	if err := CheckAccessType(false, "ext4"); err == nil || !strings.Contains(err.Error(), `fs_type "ext4" is not supported`) {
		t.Errorf("ext4: %v", err)
	}
	if err := CheckAccessType(true, ""); err == nil || !strings.Contains(err.Error(), "block access is not supported") {
		t.Errorf("block: %v", err)
	}
}
