package mountopts

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// The GKE driver's volume attributes work unchanged, as the options they mean; bad values
// and what has no equivalent are refused naming the attribute.
func TestIncumbentAttributes(t *testing.T) {
	for _, tt := range []struct {
		name    string
		attrs   map[string]string
		want    []string
		wantErr string
	}{
		{name: "all of them", attrs: map[string]string{
			"fileCacheForRangeRead": "true", "metadataStatCacheCapacity": "32Mi", "metadataTypeCacheCapacity": "-1",
			"metadataCacheTTLSeconds": "600", "gcsfuseLoggingSeverity": "debug", "gcsfuseMetadataPrefetchOnMount": "true",
			"skipCSIBucketAccessCheck": "true", "disableMetrics": "false"},
			want: []string{"--file-cache-cache-file-for-range-read=true", "--log-severity=debug",
				"--experimental-metadata-prefetch-on-mount=async", "--metadata-cache-ttl-secs=600",
				"--stat-cache-max-size-mb=32", "--type-cache-max-size-mb=-1"}},
		{name: "after mountOptions", attrs: map[string]string{contract.AttrMountOptions: "implicit-dirs", "metadataCacheTTLSeconds": "-1"},
			want: []string{"--implicit-dirs", "--metadata-cache-ttl-secs=-1"}},
		{name: "prefetch off", attrs: map[string]string{"gcsfuseMetadataPrefetchOnMount": "false"}},
		{name: "bad size", attrs: map[string]string{"metadataStatCacheCapacity": "lots"}, wantErr: "metadataStatCacheCapacity"},
		{name: "bad severity", attrs: map[string]string{"gcsfuseLoggingSeverity": "chatty"}, wantErr: "gcsfuseLoggingSeverity"},
		{name: "bad ttl", attrs: map[string]string{"metadataCacheTTLSeconds": "1h"}, wantErr: "metadataCacheTTLSeconds"},
		{name: "bad bool", attrs: map[string]string{"fileCacheForRangeRead": "yes please"}, wantErr: "fileCacheForRangeRead"},
		{name: "metrics off", attrs: map[string]string{"disableMetrics": "true"}, want: []string{NoMetricsFlag}},
		{name: "bad metrics switch", attrs: map[string]string{"disableMetrics": "sometimes"}, wantErr: "disableMetrics"},
		{name: "metrics off twice", attrs: map[string]string{contract.AttrMountOptions: "prometheus-port=0", "disableMetrics": "true"}, wantErr: "more than once"},
		{name: "legacy ttl spelling", attrs: map[string]string{"metadataCacheTtlSeconds": "600"}, want: []string{"--metadata-cache-ttl-secs=600"}},
		{name: "bad legacy ttl", attrs: map[string]string{"metadataCacheTtlSeconds": "1h"}, wantErr: `metadataCacheTtlSeconds (the GKE driver's) = "1h"`},
		{name: "both ttl spellings", attrs: map[string]string{"metadataCacheTTLSeconds": "600", "metadataCacheTtlSeconds": "600"},
			wantErr: `metadataCacheTTLSeconds = "600" and metadataCacheTtlSeconds = "600" (the GKE driver's two spellings of one attribute): given more than once`},
		{name: "legacy ttl and mountOptions", attrs: map[string]string{contract.AttrMountOptions: "metadata-cache-ttl-secs=1", "metadataCacheTtlSeconds": "2"}, wantErr: "more than once"},
		{name: "profiler off", attrs: map[string]string{"enableCloudProfilerForSidecar": "false"}},
		{name: "profiler on", attrs: map[string]string{"enableCloudProfilerForSidecar": "true"}, wantErr: `enableCloudProfilerForSidecar (the GKE driver's): value "true": this driver's sidecar has no Cloud Profiler`},
		{name: "bad profiler switch", attrs: map[string]string{"enableCloudProfilerForSidecar": "maybe"}, wantErr: `enableCloudProfilerForSidecar (the GKE driver's): value "maybe" is not true or false`},
		{name: "no NIC binding", attrs: map[string]string{"multiNICIndex": "-1"}},
		{name: "NIC 0 is a binding", attrs: map[string]string{"multiNICIndex": "0"}, wantErr: `multiNICIndex (the GKE driver's): value "0": binding gcsfuse to a NIC is not supported`},
		{name: "NIC 1", attrs: map[string]string{"multiNICIndex": "1"}, wantErr: `multiNICIndex (the GKE driver's): value "1": binding`},
		{name: "empty NIC index", attrs: map[string]string{"multiNICIndex": ""}, wantErr: `multiNICIndex (the GKE driver's): value "" is not an integer`},
		{name: "bad NIC index", attrs: map[string]string{"multiNICIndex": "eth1"}, wantErr: `multiNICIndex (the GKE driver's): value "eth1" is not an integer`},
		{name: "host network KSA", attrs: map[string]string{"hostNetworkPodKSA": "true"}},
		{name: "host network KSA off", attrs: map[string]string{"hostNetworkPodKSA": "false"}},
		{name: "bad host network KSA", attrs: map[string]string{"hostNetworkPodKSA": "pod"}, wantErr: `hostNetworkPodKSA (the GKE driver's): value "pod" is not true or false`},
		{name: "twice", attrs: map[string]string{contract.AttrMountOptions: "log-severity=info", "gcsfuseLoggingSeverity": "debug"}, wantErr: "more than once"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := FromAttributes(tt.attrs, nil, "bkt")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v.Flags, tt.want) {
				t.Fatalf("flags = %q, want %q", v.Flags, tt.want)
			}
		})
	}
}

// The GKE driver documents its mount options as keys of gcsfuse's config file,
// "section:key:value". Each must become the flag gcsfuse's table gives that key, which is not
// always section-key (--stat-cache-max-size-mb, --log-severity), in the order given.
func TestIncumbentMountOptions(t *testing.T) {
	in := []string{
		"metadata-cache:ttl-secs:-1",
		"metadata-cache:stat-cache-max-size-mb:-1",
		"metadata-cache:type-cache-max-size-mb:-1",
		"file-cache:max-size-mb:-1",
		"file-cache:cache-file-for-range-read:true",
		"logging:severity:warning",
		"gcs-connection:client-protocol:grpc",
		"write:enable-streaming-writes:true",
		"write:global-max-blocks:-1",
		"read:enable-buffered-read:true",
		"read:global-max-blocks:20",
		"file-system:kernel-list-cache-ttl-secs:60",
		"file-system:uid:1000",
		"file-system:dir-mode:755",
		"file-cache:include-regex:^bkt/a:b=c$",
		"implicit-dirs:true",
	}
	want := []string{
		"--metadata-cache-ttl-secs=-1",
		"--stat-cache-max-size-mb=-1",
		"--type-cache-max-size-mb=-1",
		"--file-cache-max-size-mb=-1",
		"--file-cache-cache-file-for-range-read=true",
		"--log-severity=warning",
		"--client-protocol=grpc",
		"--enable-streaming-writes=true",
		"--write-global-max-blocks=-1",
		"--enable-buffered-read=true",
		"--read-global-max-blocks=20",
		"--kernel-list-cache-ttl-secs=60",
		"--uid=1000",
		"--dir-mode=755",
		"--file-cache-include-regex=^bkt/a:b=c$",
		"--implicit-dirs=true",
	}
	res, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Flags, want) {
		t.Fatalf("Parse(%q)\n = %q\nwant %q", in, res.Flags, want)
	}
	// The same through a volume's mountOptions attribute, comma-separated, and a
	// PersistentVolume's mountOptions, in the documented order.
	v, err := FromAttributes(map[string]string{contract.AttrMountOptions: strings.Join(in[1:], ",")}, in[:1], "bkt")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.Flags, want) {
		t.Fatalf("FromAttributes flags\n = %q\nwant %q", v.Flags, want)
	}
}

// Config-form options are refused for the same reasons as flags, naming the key as written,
// the flag it means, and for a bad value the type gcsfuse expects.
func TestConfigFormRefused(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string // substrings of the error, besides the option itself
	}{
		{"logging:file-path:/x", []string{"--log-file", "set by the driver"}},
		{"gcs-auth:key-file:/x", []string{"--key-file", "set by the driver"}},
		{"gcs-auth:token-url:http://x", []string{"--token-url", "set by the driver"}},
		{"gcs-connection:custom-endpoint:http://x", []string{"--custom-endpoint", "set by the driver"}},
		{"file-system:temp-dir:/x", []string{"--temp-dir", "set by the driver"}},
		{"cache-dir:/x", []string{"--cache-dir", "set by the driver"}},
		{"cache-dir=/x", []string{"set by the driver"}},
		{"metadata-cache:ttl-secs:abc", []string{"integer", "takes a gcsfuse int"}},
		{"file-cache:cache-file-for-range-read:yes", []string{"true or false", "takes a gcsfuse bool"}},
		{"logging:severity:loud", []string{"not one of", "takes a gcsfuse logSeverity"}},
		{"file-system:dir-mode:999", []string{"octal", "takes a gcsfuse octal"}},
		{"gcs-retries:max-retry-sleep:soon", []string{"duration", "takes a gcsfuse duration"}},
		{"write:rapid-write:sometimes", []string{"not one of enabled, disabled", "takes a gcsfuse rapidWriteStrategy"}},
		{"metadata-prefetch-max-workers=many", []string{"integer", "takes a gcsfuse int"}},
		{"read:block-size-mb:8", []string{"--read-block-size-mb", "hidden"}},
		{"debug:fuse:true", []string{"--debug_fuse", "deprecated"}},
		{"file-system:fuse-options:allow_other", []string{"--o", "set by the driver"}},
		{"metadata-cache:nope:1", []string{`"metadata-cache:nope" is not a gcsfuse ` + GCSFuseVersion + " config key", "stat-cache-max-size-mb"}},
		{"nosuch:key:1", []string{`"nosuch:key" is not a gcsfuse`, `no section "nosuch"`}},
		{"no-such-flag=1", []string{"not a supported gcsfuse option"}},
		{"file-cache:max-size-mb:1,file-cache-max-size-mb=2", []string{"more than once"}},
	} {
		_, err := Parse(Split(tt.in))
		var oe *Error
		if !errors.As(err, &oe) || !strings.Contains(tt.in, oe.Option) {
			t.Errorf("Parse(%q): err = %v, want an *Error naming the option", tt.in, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%q): err = %v, want it to say %q", tt.in, err, w)
			}
		}
	}
}
