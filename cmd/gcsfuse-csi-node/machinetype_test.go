package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
)

func TestResolveMachineType(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels}}
	}
	for _, tt := range []struct {
		name, flag string
		node       *corev1.Node // nil: no such Node
		noAPI      bool
		want       string
	}{
		{name: "stable label", flag: machineTypeAuto, node: node(map[string]string{corev1.LabelInstanceTypeStable: "n2-standard-4", corev1.LabelInstanceType: "old"}), want: "n2-standard-4"},
		{name: "beta label", flag: machineTypeAuto, node: node(map[string]string{corev1.LabelInstanceType: "m5.large"}), want: "m5.large"},
		{name: "no label: unknown, no lookup", flag: machineTypeAuto, node: node(nil), want: csidriver.MachineTypeUnknown},
		{name: "node unreadable: gcsfuse looks up", flag: machineTypeAuto, want: ""},
		{name: "no API: gcsfuse looks up", flag: machineTypeAuto, noAPI: true, want: ""},
		{name: "lookup", flag: machineTypeLookup, node: node(map[string]string{corev1.LabelInstanceTypeStable: "n2-standard-4"}), want: ""},
		{name: "explicit", flag: "a3-highgpu-8g", node: node(map[string]string{corev1.LabelInstanceTypeStable: "n2-standard-4"}), want: "a3-highgpu-8g"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if tt.node != nil {
				cs = fake.NewClientset(tt.node)
			}
			nodes := cs.CoreV1().Nodes()
			if tt.noAPI {
				nodes = nil
			}
			if got := resolveMachineType(context.Background(), tt.flag, nodes, "n1", quiet); got != tt.want {
				t.Fatalf("resolveMachineType(%q) = %q, want %q", tt.flag, got, tt.want)
			}
		})
	}
}
