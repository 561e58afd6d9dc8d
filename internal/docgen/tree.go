package docgen

import (
	"os"
	"sort"
	"strings"
)

// topDirs lists the module's top-level directories that may hold Go
// packages.
func topDirs(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "testdata" && e.Name() != "docs" && e.Name() != "out" && e.Name() != "bin" {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
