package mountopts

import (
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
