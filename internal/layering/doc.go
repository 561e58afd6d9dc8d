// Package layering holds the test that keeps bridgehead's imports running
// one way: down the layers of the package map in the module's doc.go
// (package bridgehead). Its table lists every package's layer; a
// non-test import of a package in a higher layer fails the test, naming
// the importer and the imported package, and so does a package that is
// in no layer.
//
// The package has no code of its own: everything is in its test, which
// reads the real import graph with `go list`.
package layering
