//go:build tools

// Package tools pins the Kubernetes components that `make cluster` runs
// (kubelet, kube-proxy, kube-scheduler, kube-controller-manager, kubectl)
// and the e2e suite that `make conformance` runs, all from one
// k8s.io/kubernetes release; hack/cluster/build.sh builds them from the
// module proxy.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
