//go:build tools

// Package tools pins containerd and its runc shim for the nodes of
// `make cluster`; hack/cluster/build.sh builds them from the module proxy.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
