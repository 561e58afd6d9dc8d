//go:build tools

// Package tools pins the kube-apiserver that the Kubernetes tests run
// against; hack/kube-testenv/build.sh builds it from the module proxy.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
