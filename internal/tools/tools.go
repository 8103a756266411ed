//go:build tools

// Package tools pins modules that the build needs before code imports them.
package tools

import (
	_ "github.com/container-storage-interface/spec/lib/go/csi"
	_ "github.com/fsouza/fake-gcs-server/fakestorage"
	_ "github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/grpc"
	_ "k8s.io/api/admission/v1"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/api/resource"
	_ "k8s.io/apimachinery/pkg/util/version"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	_ "k8s.io/mount-utils"
	_ "sigs.k8s.io/yaml"
)
