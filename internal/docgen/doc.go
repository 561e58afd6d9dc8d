// Package docgen generates docs/reference from the code: the config
// fields (by reflection over config.Config, with their doc comments read
// by go/ast), the CRD fields (from the OpenAPI schemas of
// deploy/kubernetes/crds), the metrics and the log events (by scanning
// the source tree), and checks what the hand-written docs say about
// states, metrics and restart-only fields, and their links into the
// reference, against the code.
//
// `go test ./internal/docgen -run TestReference -update` rewrites the
// generated pages; without -update the test fails when a page differs
// from what the code says now.
package docgen
