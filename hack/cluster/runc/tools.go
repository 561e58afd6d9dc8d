//go:build tools

// Package tools pins runc, the OCI runtime of the nodes' containerd in
// `make cluster`; hack/cluster/build.sh builds it from the module proxy
// (with cgo and libseccomp, for the RuntimeDefault seccomp profile).
package tools

import _ "github.com/opencontainers/runc"
