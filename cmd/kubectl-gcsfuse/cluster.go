package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/audit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/webhook"
)

// The cluster reads are lists only (the audit never writes), each page bounded by
// requestTimeout and the whole read by readTimeout, so that an unreachable API server
// ends the audit with an error instead of a hang.
const (
	requestTimeout = 30 * time.Second
	readTimeout    = 3 * time.Minute
	// pageSize is the number of objects a list asks for at a time.
	pageSize = 500
)

// readCluster adds what the cluster runs: bare pods and the workloads' pod templates
// (a pod a controller made is judged through its controller's template, which is what
// would be recreated), claims, PersistentVolumes and StorageClasses.
func readCluster(ctx context.Context, inv *audit.Inventory, o auditOptions) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.Timeout = requestTimeout
	cfg.UserAgent = "kubectl-gcsfuse-audit"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	// A pod's credential ConfigMap is read when the pod is judged (get: one per such pod,
	// never a list of the cluster's ConfigMaps).
	inv.ReadConfigMapsFrom(webhook.NewKubeConfigMaps(cs))
	return readObjects(ctx, cs, inv, o.namespace)
}

// readObjects lists each kind (namespace "" for all) into inv.
func readObjects(ctx context.Context, cs kubernetes.Interface, inv *audit.Inventory, namespace string) error {
	add := func(kind string, objs []any) error {
		for _, obj := range objs {
			if err := inv.Add("cluster", obj); err != nil {
				return fmt.Errorf("%s: %w", kind, err)
			}
		}
		return nil
	}
	lists := []struct {
		kind string
		list func(metav1.ListOptions) ([]any, string, error)
	}{
		{"storageclasses", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.StorageV1().StorageClasses().List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(int) bool { return true }), l.Continue, nil
		}},
		{"persistentvolumes", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.CoreV1().PersistentVolumes().List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(int) bool { return true }), l.Continue, nil
		}},
		{"persistentvolumeclaims", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.CoreV1().PersistentVolumeClaims(namespace).List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(int) bool { return true }), l.Continue, nil
		}},
		{"pods", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.CoreV1().Pods(namespace).List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(i int) bool {
				return !controlled(l.Items[i].OwnerReferences, "ReplicaSet", "StatefulSet", "DaemonSet", "Job")
			}), l.Continue, nil
		}},
		{"deployments", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.AppsV1().Deployments(namespace).List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(int) bool { return true }), l.Continue, nil
		}},
		{"statefulsets", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.AppsV1().StatefulSets(namespace).List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(int) bool { return true }), l.Continue, nil
		}},
		{"daemonsets", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.AppsV1().DaemonSets(namespace).List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(int) bool { return true }), l.Continue, nil
		}},
		{"replicasets", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.AppsV1().ReplicaSets(namespace).List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(i int) bool { return !controlled(l.Items[i].OwnerReferences, "Deployment") }), l.Continue, nil
		}},
		{"jobs", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.BatchV1().Jobs(namespace).List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(i int) bool { return !controlled(l.Items[i].OwnerReferences, "CronJob") }), l.Continue, nil
		}},
		{"cronjobs", func(lo metav1.ListOptions) ([]any, string, error) {
			l, err := cs.BatchV1().CronJobs(namespace).List(ctx, lo)
			if err != nil {
				return nil, "", err
			}
			return items(l.Items, func(int) bool { return true }), l.Continue, nil
		}},
	}
	for _, l := range lists {
		lo := metav1.ListOptions{Limit: pageSize}
		for {
			objs, next, err := l.list(lo)
			if err != nil {
				return fmt.Errorf("list %s: %w", l.kind, err)
			}
			if err := add(l.kind, objs); err != nil {
				return err
			}
			if next == "" {
				break
			}
			lo.Continue = next
		}
	}
	return nil
}

// items returns pointers to the elements of list that keep selects.
func items[T any](list []T, keep func(i int) bool) []any {
	var out []any
	for i := range list {
		if keep(i) {
			out = append(out, &list[i])
		}
	}
	return out
}

// controlled reports whether an object's controller is of one of kinds: its pods are
// judged through that controller's template.
func controlled(refs []metav1.OwnerReference, kinds ...string) bool {
	for _, r := range refs {
		if r.Controller != nil && *r.Controller {
			for _, k := range kinds {
				if r.Kind == k {
					return true
				}
			}
		}
	}
	return false
}
