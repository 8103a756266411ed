package csidriver

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// A pod known to have no sidecar is refused with FailedPrecondition saying why (the
// kubelet shows it in a FailedMount Event); a pod with one, or one the cache does not show
// in time, is mounted.
func TestCheckSidecar(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pod := PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	for _, tt := range []struct {
		name        string
		has, known  bool
		wantCode    codes.Code
		atLeastWait bool
	}{
		{name: "has a sidecar", has: true, known: true, wantCode: codes.OK},
		{name: "no sidecar", known: true, wantCode: codes.FailedPrecondition},
		{name: "not in the cache", wantCode: codes.OK, atLeastWait: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNodeServer(Config{NodeID: "n", KubeletRoot: "/var/lib/kubelet",
				Pods: func(uid string) (*corev1.Pod, bool) {
					if uid != pod.UID {
						t.Errorf("looked up %q", uid)
					}
					return podWithSidecar(tt.has), tt.known
				}}, nil, quiet)
			start := time.Now()
			got, err := s.checkSidecar(context.Background(), pod, true)
			if (got != nil) != (tt.known && tt.has) {
				t.Fatalf("checkSidecar returned pod %v", got)
			}
			if status.Code(err) != tt.wantCode {
				t.Fatalf("checkSidecar = %v, want %v", err, tt.wantCode)
			}
			if err != nil && !strings.Contains(err.Error(), "ns/p has no gcsfuse-sidecar container") {
				t.Fatalf("error %q does not name the pod and the container", err)
			}
			if tt.atLeastWait && time.Since(start) < podLookupWait {
				t.Fatalf("gave up after %s, before the cache had %s to show the pod", time.Since(start), podLookupWait)
			}
		})
	}
}

// The pod appears in the cache while NodePublishVolume waits: its answer is used.
func TestCheckSidecarWaitsForTheCache(t *testing.T) {
	seen := time.Now().Add(200 * time.Millisecond)
	s := mustNodeServer(Config{NodeID: "n", KubeletRoot: "/var/lib/kubelet",
		Pods: func(string) (*corev1.Pod, bool) { return podWithSidecar(false), time.Now().After(seen) }},
		nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := s.checkSidecar(context.Background(), PodRef{Namespace: "ns", Name: "p", UID: "u"}, true); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("checkSidecar = %v, want FailedPrecondition once the pod shows up", err)
	}
}

// podWithSidecar is a pod with an app and, if has, a legacy sidecar.
func podWithSidecar(has bool) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	if has {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: contract.SidecarContainerName})
	}
	return p
}
