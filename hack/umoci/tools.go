//go:build tools

// Package tools pins umoci, which `make container` uses to write the OCI
// image without a container engine; hack/umoci/build.sh builds it from the
// module proxy.
package tools

import _ "github.com/opencontainers/umoci/cmd/umoci"
