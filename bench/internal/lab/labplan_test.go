package lab

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLabPlanMatches keeps the benchmark's topology in step with
// deploy/lab/lab.sh, which the demo and the e2e tests use: the same
// addresses on the same links. (modes.TestLabCatalogMatches checks the
// sites catalog.)
func TestLabPlanMatches(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/lab/lab.sh")
	if err != nil {
		t.Fatal(err)
	}
	lab := string(raw)
	raw, err = os.ReadFile("../../../deploy/lab/lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	lib := string(raw)

	// Addresses: `ip -n "$p-ROLE" addr add ADDR dev DEV` in lab.sh (the
	// WAN), and the sites lab.sh builds with lib.sh's lab_two_sites:
	// `lab_site "$1" SITE GW4 GW6 NODE4 NODE6 POD4 POD6`, the gateway's
	// on its lan, the node's on eth0, the pod's on the node's lo.
	re := regexp.MustCompile(`ip -n "\$p-([a-z-]+)" addr add (\S+) dev (\S+)`)
	var want []string
	for _, m := range re.FindAllStringSubmatch(lab, -1) {
		want = append(want, m[1]+" "+m[2]+" "+m[3])
	}
	if !strings.Contains(lab, `lab_two_sites "$p"`) {
		t.Fatal("lab.sh no longer builds its sites with lab_two_sites")
	}
	site := regexp.MustCompile(`(?m)^\s*lab_site "\$1" ([a-z]+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)$`)
	for _, m := range site.FindAllStringSubmatch(lib, -1) {
		gw, node := m[1]+"-gw", m[1]+"-node"
		want = append(want, gw+" "+m[2]+" lan", gw+" "+m[3]+" lan",
			node+" "+m[4]+" eth0", node+" "+m[5]+" eth0", node+" "+m[6]+" lo", node+" "+m[7]+" lo")
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
		t.Fatalf("found only %d addresses in lab.sh and lib.sh; did their form change?\n%v", len(want), want)
	}
	if !slices.Equal(got, want) {
		t.Errorf("addresses differ:\nlab.sh: %v\nbench:  %v", want, got)
	}
}

func TestSitePrefixes(t *testing.T) {
	if got := SitePrefixes("a"); !slices.Equal(got, []string{"10.224.0.0/16", "10.244.0.0/16", "fd00:224::/64", "fd00:244::/56"}) {
		t.Errorf("SitePrefixes(a) = %v", got)
	}
	if got := SitePrefixes4("b"); !slices.Equal(got, []string{"192.168.50.0/24", "10.245.0.0/16"}) {
		t.Errorf("SitePrefixes4(b) = %v", got)
	}
	// Callers get copies: changing one leaves the plan alone.
	SitePrefixes4("a")[0] = "0.0.0.0/0"
	SitePrefixes("b")[0] = "0.0.0.0/0"
	if siteAPrefixes4[0] != "10.224.0.0/16" || siteBPrefixes4[0] != "192.168.50.0/24" {
		t.Error("a caller changed the address plan")
	}
}
