package nodeplugin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestInitialMachineType(t *testing.T) {
	for _, tt := range []struct {
		flag     string
		api      bool
		want     string
		fromNode bool
	}{
		{MachineTypeAuto, true, "", true},
		{MachineTypeAuto, false, "", false},
		{MachineTypeLookup, true, "", false},
		{"a3-highgpu-8g", true, "a3-highgpu-8g", false},
	} {
		if mt, fromNode := initialMachineType(tt.flag, tt.api, quietLog); mt != tt.want || fromNode != tt.fromNode {
			t.Errorf("initialMachineType(%q, api %v) = %q, %v; want %q, %v", tt.flag, tt.api, mt, fromNode, tt.want, tt.fromNode)
		}
	}
}

func TestMachineTypeFromNode(t *testing.T) {
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels}}
	}
	for _, tt := range []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"stable label", node(map[string]string{corev1.LabelInstanceTypeStable: "n2-standard-4", corev1.LabelInstanceType: "old"}), "n2-standard-4"},
		{"beta label", node(map[string]string{corev1.LabelInstanceType: "m5.large"}), "m5.large"},
		{"no label", node(nil), csidriver.MachineTypeUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := machineTypeFromNode(context.Background(), fake.NewClientset(tt.node).CoreV1().Nodes(), "n1")
			if err != nil || got != tt.want {
				t.Fatalf("machineTypeFromNode = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := machineTypeFromNode(context.Background(), fake.NewClientset().CoreV1().Nodes(), "n1"); err == nil {
		t.Fatal("no error for a node that cannot be read")
	}
}

// While the API server does not answer, the node plugin keeps trying in the background and
// sets the machine type once the Node answers (it started during an API outage: e2e
// TestAPIServerOutage followed by TestMachineType found it never did).
func TestLearnMachineTypeRetriesUntilTheNodeAnswers(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelInstanceTypeStable: "n2-standard-4"}}})
	var calls atomic.Int32
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) <= 2 {
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	var got atomic.Pointer[string]
	done := make(chan struct{})
	go func() {
		defer close(done)
		learnMachineType(context.Background(), cs.CoreV1().Nodes(), "n1", func(mt string) error { got.Store(&mt); return nil }, quietLog)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("learnMachineType did not finish")
	}
	if p := got.Load(); p == nil || *p != "n2-standard-4" || calls.Load() != 3 {
		t.Fatalf("set %v after %d calls; want n2-standard-4 after 3", p, calls.Load())
	}
}

// It stops when its context ends, having set nothing.
func TestLearnMachineTypeStopsWithItsContext(t *testing.T) {
	cs := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		learnMachineType(ctx, cs.CoreV1().Nodes(), "n1", func(string) error { t.Error("set called"); return nil }, quietLog)
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("learnMachineType ignored its context")
	}
}
