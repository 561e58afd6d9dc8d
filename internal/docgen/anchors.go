package docgen

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s#]*\.md)#([^)\s]+)\)`)
	explicitID = regexp.MustCompile(`<a id="([^"]+)"></a>`)
	heading    = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// Anchors are the fragments a Markdown page answers to: its explicit
// <a id> anchors and the anchors GitHub makes of its headings (lower
// case, spaces to '-', other punctuation dropped, repeats numbered).
func Anchors(md string) map[string]bool {
	out := map[string]bool{}
	for _, m := range explicitID.FindAllStringSubmatch(md, -1) {
		out[m[1]] = true
	}
	count := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := count[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		count[a]++
	}
	return out
}

// CheckReferenceLinks reports links from the files (named from root)
// into docs/reference whose fragment the page does not have.
func CheckReferenceLinks(root string, files []string) ([]string, error) {
	pages := map[string]map[string]bool{}
	var problems []string
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := path.Clean(path.Join(path.Dir(f), m[1]))
			if !strings.HasPrefix(target, "docs/reference/") {
				continue
			}
			anchors, ok := pages[target]
			if !ok {
				page, err := os.ReadFile(filepath.Join(root, target))
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s: link to %s, which does not exist", f, target))
					continue
				}
				anchors = Anchors(string(page))
				pages[target] = anchors
			}
			if !anchors[m[2]] {
				problems = append(problems, fmt.Sprintf("%s: link to %s#%s, which has no such anchor", f, target, m[2]))
			}
		}
	}
	return problems, nil
}
