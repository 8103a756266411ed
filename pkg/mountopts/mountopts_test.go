package mountopts

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		in       []string
		want     []string
		readOnly bool
		wantErr  string // substring; the error must also name the option
	}{
		{name: "bool flag", in: []string{"implicit-dirs"}, want: []string{"--implicit-dirs"}},
		{name: "bool with value", in: []string{"enable-streaming-writes=false"}, want: []string{"--enable-streaming-writes=false"}},
		{name: "ints and modes", in: []string{"uid=1000", "gid=2000", "file-mode=0640", "dir-mode=755"},
			want: []string{"--uid=1000", "--gid=2000", "--file-mode=0640", "--dir-mode=755"}},
		{name: "config-file style", in: []string{"file-cache:max-size-mb:-1", "metadata-cache:ttl-secs:60"},
			want: []string{"--file-cache-max-size-mb=-1", "--metadata-cache-ttl-secs=60"}},
		{name: "ro", in: []string{"ro", "implicit-dirs"}, want: []string{"--implicit-dirs"}, readOnly: true},
		{name: "only-dir", in: []string{"only-dir=data/2024"}, want: []string{"--only-dir=data/2024"}},
		{name: "duration", in: []string{"max-retry-sleep=30s"}, want: []string{"--max-retry-sleep=30s"}},
		{name: "enum", in: []string{"log-severity=debug"}, want: []string{"--log-severity=debug"}},
		{name: "machine type", in: []string{"machine-type=Standard_D2s_v3"}, want: []string{"--machine-type=Standard_D2s_v3"}},
		{name: "machine type with a slash", in: []string{"machine-type=zones/x/machineTypes/n2"}, wantErr: "machine-type"},
		{name: "metrics off", in: []string{"prometheus-port=0"}, want: []string{"--prometheus-port=0"}},
		{name: "metrics port is the driver's", in: []string{"prometheus-port=9100"}, wantErr: "only 0"},
		{name: "driver owned endpoint", in: []string{"custom-endpoint=http://evil/"}, wantErr: "set by the driver"},
		{name: "driver owned key file", in: []string{"key-file=/etc/passwd"}, wantErr: "set by the driver"},
		{name: "driver owned temp dir", in: []string{"temp-dir=/"}, wantErr: "set by the driver"},
		{name: "driver owned o", in: []string{"o=allow_other"}, wantErr: "set by the driver"},
		{name: "unknown", in: []string{"implicit-dir"}, wantErr: "not a supported"},
		{name: "leading dashes", in: []string{"--implicit-dirs"}, wantErr: "leading dashes"},
		{name: "whitespace injection", in: []string{"uid=1 --key-file=/x"}, wantErr: "whitespace"},
		{name: "newline", in: []string{"uid=1\n"}, wantErr: "whitespace"},
		{name: "int out of range", in: []string{"uid=-5"}, wantErr: "integer"},
		{name: "int garbage", in: []string{"uid=abc"}, wantErr: "integer"},
		{name: "missing value", in: []string{"uid"}, wantErr: "needs a value"},
		{name: "bad bool", in: []string{"implicit-dirs=yes-please"}, wantErr: "true or false"},
		{name: "bad octal", in: []string{"file-mode=999"}, wantErr: "octal"},
		{name: "octal too big", in: []string{"file-mode=7777"}, wantErr: "octal"},
		{name: "bad enum", in: []string{"log-severity=loud"}, wantErr: "not one of"},
		{name: "billing-project", in: []string{"billing-project=my-project-1"}, want: []string{"--billing-project=my-project-1"}},
		{name: "billing-project bad", in: []string{"billing-project=My_Project"}, wantErr: "not allowed"},
		{name: "only-dir escape", in: []string{"only-dir=../other"}, wantErr: "not allowed"},
		{name: "only-dir dash", in: []string{"only-dir=-x"}, wantErr: "not allowed"},
		{name: "duplicate", in: []string{"uid=1", "uid=2"}, wantErr: "more than once"},
		{name: "ro and rw", in: []string{"ro", "rw"}, wantErr: "both"},
		{name: "ro with value", in: []string{"ro=1"}, wantErr: "no value"},
		{name: "bad config style", in: []string{"file-cache:"}, wantErr: "section:key:value"},
		{name: "negative duration", in: []string{"max-retry-sleep=-1s"}, wantErr: "duration"},
		{name: "NaN float", in: []string{"limit-ops-per-sec=NaN"}, wantErr: "number"},
		{name: "non-ascii", in: []string{"only-dir=é"}, wantErr: "non-ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Parse(tt.in)
			if tt.wantErr != "" {
				var oe *Error
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &oe) {
					t.Fatalf("Parse(%q) error = %v, want *Error containing %q", tt.in, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), strings.TrimSpace(strings.SplitN(oe.Option, "=", 2)[0])) {
					t.Fatalf("error %q does not name the option", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(res.Flags, tt.want) || res.ReadOnly != tt.readOnly {
				t.Fatalf("Parse(%q) = %q ro=%v, want %q ro=%v", tt.in, res.Flags, res.ReadOnly, tt.want, tt.readOnly)
			}
		})
	}
}

func TestFromAttributes(t *testing.T) {
	tests := []struct {
		name       string
		attrs      map[string]string
		flags      []string
		handle     string
		wantBucket string
		wantFlags  []string
		wantErr    string
	}{
		{name: "inline", attrs: map[string]string{"bucketName": "my-bucket", "mountOptions": "implicit-dirs,uid=1001",
			"csi.storage.k8s.io/pod.name": "p", "csi.storage.k8s.io/ephemeral": "true"}, handle: "csi-123",
			wantBucket: "my-bucket", wantFlags: []string{"--implicit-dirs", "--uid=1001"}},
		{name: "pv handle and mount flags", handle: "pv-bucket", flags: []string{"implicit-dirs", "gid=3,file-mode=0600"},
			wantBucket: "pv-bucket", wantFlags: []string{"--implicit-dirs", "--gid=3", "--file-mode=0600"}},
		{name: "file cache capacity", attrs: map[string]string{"bucketName": "bkt", "fileCacheCapacity": "1Gi"},
			wantBucket: "bkt", wantFlags: []string{"--file-cache-max-size-mb=1024"}},
		{name: "the GKE driver's federation attributes are pkg/credentials'", attrs: map[string]string{"bucketName": "bkt",
			"identityProvider": "https://container.googleapis.com/v1/projects/p-123/locations/l/clusters/c", "identityPool": "p-123.svc.id.goog"},
			wantBucket: "bkt"},
		{name: "pv handle bucket:suffix", handle: "pv-bucket:vol-2", wantBucket: "pv-bucket"},
		{name: "pv handle dotted bucket:suffix", handle: "my.bucket.example.com:A_b.9", wantBucket: "my.bucket.example.com"},
		{name: "bucketName over the handle", attrs: map[string]string{"bucketName": "bkt"}, handle: "other:x", wantBucket: "bkt"},
		{name: "empty suffix", handle: "pv-bucket:", wantErr: `volume handle "pv-bucket:": the part after the first ':' ("")`},
		{name: "second colon", handle: "pv-bucket:a:b", wantErr: `volume handle "pv-bucket:a:b": the part after the first ':' ("a:b")`},
		{name: "suffix with a slash", handle: "pv-bucket:a/b", wantErr: `("a/b") must be a label`},
		{name: "suffix ending in a dash", handle: "pv-bucket:a-", wantErr: `("a-") must be a label`},
		{name: "suffix too long", handle: "pv-bucket:" + strings.Repeat("a", 64), wantErr: "must be a label"},
		{name: "bad bucket before the suffix", handle: "PV:x", wantErr: `bucket name "PV"`},
		{name: "all buckets by handle", handle: "_", wantErr: `bucket name "_" (gcsfuse's all-buckets mode) is not supported: a volume here mounts one bucket`},
		{name: "all buckets by handle with a suffix", handle: "_:vol-1", wantErr: `bucket name "_" (gcsfuse's all-buckets mode)`},
		{name: "all buckets by name", attrs: map[string]string{"bucketName": "_"}, wantErr: `bucket name "_" (gcsfuse's all-buckets mode)`},
		{name: "unknown attribute", attrs: map[string]string{"bucketName": "bkt", "bucketname": "x"}, wantErr: `unknown volume attribute "bucketname"`},
		{name: "bad capacity", attrs: map[string]string{"bucketName": "bkt", "fileCacheCapacity": "lots"}, wantErr: "fileCacheCapacity"},
		{name: "no bucket", attrs: map[string]string{}, wantErr: "bucket name is empty"},
		{name: "bad option in attribute", attrs: map[string]string{"bucketName": "bkt", "mountOptions": "token-url=x"}, wantErr: "token-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := FromAttributes(tt.attrs, tt.flags, tt.handle)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Bucket != tt.wantBucket || !reflect.DeepEqual(v.Flags, tt.wantFlags) {
				t.Fatalf("got bucket %q flags %q", v.Bucket, v.Flags)
			}
		})
	}
}

// FromAttributes must give the same flags in the same order for the same input: the node
// service compares a republished volume with reflect.DeepEqual, so any run-to-run change in
// order turns an identical, idempotent NodePublishVolume into AlreadyExists. Map iteration
// order is random per range statement, so 100 calls catch an order that follows it.
func TestFromAttributesDeterministic(t *testing.T) {
	const calls = 100
	attrs := map[string]string{
		"bucketName":                       "bkt",
		"mountOptions":                     "implicit-dirs,uid=1001",
		"fileCacheCapacity":                "1Gi",
		"csi.storage.k8s.io/pod.name":      "p",
		"csi.storage.k8s.io/pod.uid":       "u",
		"csi.storage.k8s.io/ephemeral":     "true",
		"csi.storage.k8s.io/pod.namespace": "ns",
	}
	flags := []string{"gid=3"}
	// The documented order: mount flags, then mountOptions, then fileCacheCapacity.
	want := []string{"--gid=3", "--implicit-dirs", "--uid=1001", "--file-cache-max-size-mb=1024"}
	for i := 0; i < calls; i++ {
		v, err := FromAttributes(attrs, flags, "")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v.Flags, want) {
			t.Fatalf("call %d: flags %q, want %q", i, v.Flags, want)
		}
	}
	// Several unknown attributes: the error must name the same one every time.
	bad := map[string]string{"bucketName": "bkt", "zeta": "1", "alpha": "1", "mid": "1", "beta": "1"}
	for i := 0; i < calls; i++ {
		_, err := FromAttributes(bad, nil, "")
		if err == nil || !strings.Contains(err.Error(), `"alpha"`) {
			t.Fatalf("call %d: error %v, want the first unknown attribute in sorted order (\"alpha\")", i, err)
		}
	}
}

func TestValidateBucket(t *testing.T) {
	for b, ok := range map[string]bool{
		"my-bucket": true, "a_b": true, "abc": true, "my.bucket.example.com": true,
		"": false, "ab": false, "_": false, "-abc": false, "abc-": false, "ABC": false,
		"a/b": false, strings.Repeat("a", 64): false, "a b": false,
	} {
		if err := ValidateBucket(b); (err == nil) != ok {
			t.Errorf("ValidateBucket(%q) = %v, want ok=%v", b, err, ok)
		}
	}
}

// FuzzParse checks that whatever a pod author writes, Parse either refuses it or returns only
// flags the policy accepts, each one argument with no whitespace.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"implicit-dirs,uid=1000", "file-cache:max-size-mb:-1", "ro,key-file=/x", "uid=1 --x", "only-dir=../a", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		res, err := Parse(Split(s))
		if err != nil {
			return
		}
		for _, fl := range res.Flags {
			name, _, _ := strings.Cut(strings.TrimPrefix(fl, "--"), "=")
			if o := byFlag[name]; o == nil || o.refuse != "" || !strings.HasPrefix(fl, "--") {
				t.Fatalf("Parse(%q) produced non-allowlisted flag %q", s, fl)
			}
			if strings.ContainsAny(fl, " \t\n\r\x00") {
				t.Fatalf("Parse(%q) produced flag with whitespace %q", s, fl)
			}
		}
	})
}

// read_ahead_kb (the GKE driver's kernel option) is the node plugin's, not a gcsfuse flag:
// a whole number of KiB within bounds, once.
func TestReadAheadOption(t *testing.T) {
	res, err := Parse([]string{"implicit-dirs", "read_ahead_kb=1024"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ReadAheadKB == nil || *res.ReadAheadKB != 1024 || len(res.Flags) != 1 {
		t.Fatalf("read-ahead %v, flags %q; want 1024 KiB and no flag for it", res.ReadAheadKB, res.Flags)
	}
	if res, _ := Parse([]string{"read_ahead_kb=0"}); res == nil || res.ReadAheadKB == nil || *res.ReadAheadKB != 0 {
		t.Fatal("read_ahead_kb=0 (no read-ahead) refused or lost")
	}
	// The documented maximum is accepted; one more is not (below).
	if res, err := Parse([]string{fmt.Sprintf("read_ahead_kb=%d", MaxReadAheadKB)}); err != nil || *res.ReadAheadKB != MaxReadAheadKB {
		t.Fatalf("read_ahead_kb=%d (the maximum) refused: %v", MaxReadAheadKB, err)
	}
	if res, _ := Parse([]string{"implicit-dirs"}); res.ReadAheadKB != nil {
		t.Fatal("a read-ahead without the option")
	}
	for _, bad := range [][]string{{"read_ahead_kb"}, {"read_ahead_kb=-1"}, {"read_ahead_kb=1M"}, {"read_ahead_kb=131073"},
		{"read_ahead_kb=8", "read_ahead_kb=16"}} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "read_ahead_kb") {
			t.Errorf("%q: err %v, want one naming read_ahead_kb", bad, err)
		}
	}
}

func TestMountModeAttribute(t *testing.T) {
	for _, tc := range []struct {
		attrs  map[string]string
		shared bool
		err    string
	}{
		{attrs: map[string]string{}, shared: false},
		{attrs: map[string]string{contract.AttrMountMode: ""}, shared: false},
		{attrs: map[string]string{contract.AttrMountMode: "sidecar"}, shared: false},
		{attrs: map[string]string{contract.AttrMountMode: "shared"}, shared: true},
		{attrs: map[string]string{contract.AttrMountMode: "Shared"}, err: `mountMode "Shared": want "sidecar"`},
		{attrs: map[string]string{contract.AttrMountMode: "node"}, err: `mountMode "node"`},
	} {
		tc.attrs[contract.AttrBucketName] = "my-bucket"
		v, err := FromAttributes(tc.attrs, nil, "")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want it to contain %q", tc.attrs, err, tc.err)
			}
			continue
		}
		if err != nil || v.Shared != tc.shared {
			t.Errorf("%v: shared %v err %v, want %v", tc.attrs, v != nil && v.Shared, err, tc.shared)
		}
	}
}

// The error naming an unknown attribute lists every attribute a volume may carry: each of
// them is accepted, so the list cannot drift from what is.
func TestUnknownAttributeListsEveryKnownOne(t *testing.T) {
	_, err := FromAttributes(map[string]string{contract.AttrBucketName: "bkt", "bogus": "x"}, nil, "")
	if err == nil {
		t.Fatal("an unknown attribute accepted")
	}
	for _, k := range append(slices.Clone(ownAttributes), slices.Collect(maps.Keys(incumbentAttrs))...) {
		if !knownAttribute(k) || !strings.Contains(err.Error(), k) {
			t.Errorf("attribute %s: known %v, in the error %v", k, knownAttribute(k), strings.Contains(err.Error(), k))
		}
	}
}
