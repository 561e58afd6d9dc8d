package bench

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLabPlanMatches keeps the benchmark's topology and config in step
// with deploy/lab/lab.sh, which the demo and the e2e tests use: the same
// addresses on the same links, and the same sites catalog.
func TestLabPlanMatches(t *testing.T) {
	raw, err := os.ReadFile("../deploy/lab/lab.sh")
	if err != nil {
		t.Fatal(err)
	}
	lab := string(raw)

	// Addresses: `ip -n "$p-ROLE" addr add ADDR dev DEV` in lab.sh.
	re := regexp.MustCompile(`ip -n "\$p-([a-z-]+)" addr add (\S+) dev (\S+)`)
	var want []string
	for _, m := range re.FindAllStringSubmatch(lab, -1) {
		want = append(want, m[1]+" "+m[2]+" "+m[3])
	}
	var got []string
	for _, c := range labLinks(ANode, BNode, AGW, BGW, 1500) {
		if len(c) >= 7 && c[2] == "addr" && c[3] == "add" && c[5] == "dev" {
			got = append(got, c[1]+" "+c[4]+" "+c[6])
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) < 14 {
		t.Fatalf("found only %d addresses in lab.sh; did its form change?\n%v", len(want), want)
	}
	if !slices.Equal(got, want) {
		t.Errorf("addresses differ:\nlab.sh: %v\nbench:  %v", want, got)
	}

	// The sites catalog: lab.sh's catalog() heredoc, without the
	// lab-only keepalive lines, against the one BridgeheadConfig writes.
	start := strings.Index(lab, "cat <<YAML\n")
	end := strings.Index(lab, "\nYAML\n")
	if start < 0 || end < start {
		t.Fatal("no catalog heredoc in lab.sh")
	}
	var labSites []string
	for _, l := range strings.Split(lab[start+len("cat <<YAML\n"):end], "\n") {
		if strings.Contains(l, "keepalive:") {
			continue
		}
		l = strings.ReplaceAll(l, "$1", "PUBLIC-A")
		labSites = append(labSites, strings.ReplaceAll(l, "$2", "PUBLIC-B"))
	}
	cfg := BridgeheadConfig("a", "/k/a.key", "aesgcm", 1420, "PUBLIC-A", "PUBLIC-B")
	i := strings.Index(cfg, "sites:\n")
	if i < 0 {
		t.Fatal("no sites in the benchmark's config")
	}
	benchSites := strings.Split(strings.TrimRight(cfg[i:], "\n"), "\n")
	if !slices.Equal(benchSites, labSites) {
		t.Errorf("sites catalogs differ:\nlab.sh:\n%s\nbench:\n%s", strings.Join(labSites, "\n"), strings.Join(benchSites, "\n"))
	}
}
