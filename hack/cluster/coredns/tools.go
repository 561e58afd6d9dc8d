//go:build tools

// Package tools pins CoreDNS, the cluster DNS of `make cluster`;
// hack/cluster/build.sh builds it from the module proxy.
package tools

import _ "github.com/coredns/coredns"
