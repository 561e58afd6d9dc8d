package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeFollowing turns the config at path into one that follows a
// catalog (kubernetes.follow) and moves its sites into the catalog file
// beside it; it returns the catalog's path.
func writeFollowing(t *testing.T, path string) string {
	t.Helper()
	head, sites, ok := strings.Cut(mustRead(t, path), "sites:\n")
	if !ok {
		t.Fatal("no sites in", path)
	}
	dir := filepath.Dir(path)
	if err := os.WriteFile(filepath.Join(dir, "gw.kubeconfig"), []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cat := filepath.Join(dir, "catalog.yaml")
	writeAtomic(t, cat, "sites:\n"+sites)
	writeAtomic(t, path, head+"kubernetes: {kubeconfig: gw.kubeconfig, follow: true}\n")
	return cat
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestReloadFollowedCatalog: a change of the followed catalog file is a
// reload like a change of the config: applied all or nothing, a bad
// catalog refused naming the catalog file and the running config kept,
// an unchanged pair of files not parsed.
func TestReloadFollowedCatalog(t *testing.T) {
	l := newLabAB(t)
	sa, sb, pathA := l.a, l.b, l.path
	sc := l.keys.siteYAML("c", "10.3.0.0/24", "10.103.0.0/16", "127.0.0.1:51003")
	cat := writeFollowing(t, pathA)
	ga, kernA := l.startA(t)
	if got := len(ga.cfg.Load().Sites); got != 2 {
		t.Fatalf("started with %d sites from the catalog, want 2", got)
	}

	// Unchanged: the watcher's reload does nothing.
	calls := kernA.calls
	if err := ga.reload(pathA, triggerWatch); err != nil || kernA.calls != calls {
		t.Fatalf("unchanged: err %v, %d kernel applies", err, kernA.calls-calls)
	}

	// A bad catalog is refused, naming the catalog file and field.
	before := ga.cfg.Load()
	writeAtomic(t, cat, "sites:\n"+sa+sb+strings.Replace(sc, "10.103.0.0/16", "10.102.0.0/16", 1))
	err := ga.reload(pathA, triggerWatch)
	if err == nil || !strings.Contains(err.Error(), cat+":") || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("bad catalog: %v, want an overlap in %s", err, cat)
	}
	if ga.cfg.Load() != before || kernA.calls != calls {
		t.Fatal("a refused catalog changed the running config or the kernel")
	}

	// A good one is applied: site c's CIDRs go into the tunnel.
	writeAtomic(t, cat, "sites:\n"+sa+sb+sc)
	if err := ga.reload(pathA, triggerWatch); err != nil {
		t.Fatal(err)
	}
	if got := len(ga.cfg.Load().Sites); got != 3 {
		t.Fatalf("%d sites after the catalog change, want 3", got)
	}
	var tunnel []string
	for _, p := range kernA.tunnel() {
		tunnel = append(tunnel, p.String())
	}
	if !slices.Contains(tunnel, "10.103.0.0/16") {
		t.Errorf("tunnel routes %v lack site c's pod CIDR", tunnel)
	}

	// Inline sites beside the followed catalog: refused, naming the field.
	running := ga.cfg.Load()
	writeAtomic(t, pathA, mustRead(t, pathA)+"sites:\n"+sa)
	if err := ga.reload(pathA, triggerWatch); err == nil || !strings.Contains(err.Error(), "sites: must not be set with kubernetes.follow") {
		t.Fatalf("inline sites with follow: %v", err)
	}
	if ga.cfg.Load() != running {
		t.Fatal("refused config replaced the running one")
	}
}
