package filewatch

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

func TestWatchRelevant(t *testing.T) {
	cw := &Watcher{path: "/etc/bridgehead/bridgehead.yaml"}
	tests := []struct {
		name string
		ev   fsnotify.Event
		want bool
	}{
		{"config written", fsnotify.Event{Name: "/etc/bridgehead/bridgehead.yaml", Op: fsnotify.Write}, true},
		{"config renamed over", fsnotify.Event{Name: "/etc/bridgehead/bridgehead.yaml", Op: fsnotify.Create}, true},
		{"config removed", fsnotify.Event{Name: "/etc/bridgehead/bridgehead.yaml", Op: fsnotify.Remove}, true},
		{"ConfigMap data link swapped", fsnotify.Event{Name: "/etc/bridgehead/..data", Op: fsnotify.Create}, true},
		{"config touched", fsnotify.Event{Name: "/etc/bridgehead/bridgehead.yaml", Op: fsnotify.Chmod}, false},
		{"editor temp file", fsnotify.Event{Name: "/etc/bridgehead/bridgehead.yaml.swp", Op: fsnotify.Write}, false},
		{"own log file", fsnotify.Event{Name: "/etc/bridgehead/bridgehead.log", Op: fsnotify.Write}, false},
		{"ConfigMap staging link", fsnotify.Event{Name: "/etc/bridgehead/..data_tmp", Op: fsnotify.Create}, false},
		{"ConfigMap timestamped dir", fsnotify.Event{Name: "/etc/bridgehead/..2026_11_30_20_00_00.1", Op: fsnotify.Create}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := cw.relevant(tc.ev); got != tc.want {
				t.Errorf("relevant(%v) = %v, want %v", tc.ev, got, tc.want)
			}
		})
	}
}

// startWatch runs a watcher with no debounce, so every relevant event is
// one trigger and the count is exact.
func startWatch(t *testing.T, path string) (*Watcher, <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	changed := make(chan struct{}, 1)
	cw := &Watcher{path: path, changed: changed, log: slog.New(slog.DiscardHandler)}
	if err := cw.start(ctx); err != nil {
		t.Fatal(err)
	}
	return cw, changed
}

func waitChanged(t *testing.T, changed <-chan struct{}) {
	t.Helper()
	select {
	case <-changed:
	case <-time.After(10 * time.Second): // a failure bound, not a measurement
		t.Fatal("no reload signalled for a change of the config file")
	}
}

// TestWatchIgnoresOtherFiles: a gateway whose directory also holds its log
// file, a CPU profile, its control socket and an editor's files reloads
// only when the config file changes. Issue #14 measured a full core busy
// on an idle gateway that reloaded on each of its own log writes. The
// reloads are counted, not timed: events arrive in order, so when the
// config's rename has been signalled every earlier event was seen.
func TestWatchIgnoresOtherFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bridgehead.yaml")
	if err := os.WriteFile(path, []byte("site: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cw, changed := startWatch(t, path)

	logf, err := os.Create(filepath.Join(dir, "bridgehead.log"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := logf.WriteString("time=... level=INFO msg=\"line\"\n"); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			os.WriteFile(filepath.Join(dir, "cpu.prof"), []byte{byte(i)}, 0o644)
		}
	}
	logf.Close()
	ln, err := net.Listen("unix", filepath.Join(dir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	os.Mkdir(filepath.Join(dir, "old"), 0o755)
	os.WriteFile(filepath.Join(dir, ".bridgehead.yaml.swp"), []byte("x"), 0o600)
	os.Chmod(path, 0o600) // metadata only
	if n := cw.Triggers(); n != 0 {
		t.Fatalf("%d reloads for files other than the config", n)
	}

	// The config itself, replaced the way editors and tools do it.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte("site: b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, changed)
	if n := cw.Triggers(); n != 1 {
		t.Fatalf("%d reloads, want exactly 1 (for the config's rename)", n)
	}
}

// TestWatchConfigMapSwap: a Kubernetes ConfigMap volume updates by
// swapping the ..data link; the config file is a link through it.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mkData := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "bridgehead.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkData("..2026_11_30_20_00_00.1", "site: a\n")
	if err := os.Symlink("..2026_11_30_20_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bridgehead.yaml")
	if err := os.Symlink("..data/bridgehead.yaml", path); err != nil {
		t.Fatal(err)
	}
	cw, changed := startWatch(t, path)

	// What the kubelet does: new timestamped dir, staging link, rename.
	mkData("..2026_11_30_20_05_00.2", "site: b\n")
	if err := os.Symlink("..2026_11_30_20_05_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if n := cw.Triggers(); n != 0 {
		t.Fatalf("%d reloads before the swap", n)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitChanged(t, changed)
	if n := cw.Triggers(); n != 1 {
		t.Fatalf("%d reloads, want exactly 1 (for the ..data swap)", n)
	}
	if b, _ := os.ReadFile(path); string(b) != "site: b\n" {
		t.Fatalf("config reads %q after the swap", b)
	}
}
