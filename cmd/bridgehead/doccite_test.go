package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citedDocRE matches a repository path to a Markdown page as code
// comments and scripts cite it: "docs/operations/upgrades.md",
// "deploy/README.md", "bench/README.md".
var citedDocRE = regexp.MustCompile(`(?:^|[\s("'` + "`" + `])((?:docs|deploy|bench)/[A-Za-z0-9_./-]*\.md|README\.md|CHANGELOG\.md)\b`)

// TestCodeCitesDocsThatExist fails when a Go comment, script, manifest
// or template names a Markdown page that is not in the repository: pages
// move (the docs are split by task), and a comment that sends a reader to
// a page that is gone is a stale answer.
func TestCodeCitesDocsThatExist(t *testing.T) {
	exts := map[string]bool{".go": true, ".sh": true, ".yaml": true, ".yml": true, ".json": true, ".bicep": true, ".dot": true}
	checked := 0
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch rel {
			case ".git", "out", "bin", "docs/conformance":
				return filepath.SkipDir
			}
			return nil
		}
		if !exts[filepath.Ext(rel)] && filepath.Base(rel) != "Makefile" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		goFile := strings.HasSuffix(rel, ".go")
		for i, line := range strings.Split(string(data), "\n") {
			if _, comment, ok := strings.Cut(line, "// "); goFile && ok {
				line = comment // in Go, only comments cite pages; strings are fixtures
			} else if goFile {
				continue
			}
			for _, m := range citedDocRE.FindAllStringSubmatch(line, -1) {
				cited := m[1]
				if strings.Contains(cited, "testdata/") {
					continue
				}
				// A bare README.md is the one beside the citing file, or
				// the top-level one.
				candidates := []string{filepath.Join(repo, cited)}
				if !strings.Contains(cited, "/") {
					candidates = append(candidates, filepath.Join(filepath.Dir(path), cited))
				}
				found := false
				for _, c := range candidates {
					if _, err := os.Stat(c); err == nil {
						found = true
					}
				}
				if !found {
					t.Errorf("%s:%d cites %s, which does not exist", rel, i+1, cited)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d files read: the walk did not reach the tree", checked)
	}
}
