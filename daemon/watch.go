package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// ReloadDebounce is how long the watcher waits after the last change to
// the config file before reloading, so an editor's burst of writes and
// renames becomes one reload.
const ReloadDebounce = 250 * time.Millisecond

// triggerWatch is the reload trigger of the watcher. A watcher reload of
// an unchanged file does nothing at all (a SIGHUP one repairs routes).
const triggerWatch = "file changed"

// configMapData is the symlink a Kubernetes ConfigMap volume swaps
// atomically on every update; the files themselves are links through it.
const configMapData = "..data"

// configWatcher watches the directory holding a config file and signals
// after each burst of changes to the file itself. It watches the
// directory, not the file: editors replace files by rename, and
// Kubernetes ConfigMap mounts swap a symlink (..data) next to the file,
// so the file's own inode is not where changes show up. Every other
// event in the directory — the daemon's own log file, a CPU profile, the
// control socket, anything an operator keeps there — is ignored, so an
// idle gateway stays idle whatever shares its directory.
//
// Its goroutine owns the fsnotify watcher and the timer; triggers is
// read by tests from any goroutine.
type configWatcher struct {
	path     string
	debounce time.Duration
	changed  chan<- struct{}
	log      *slog.Logger
	// triggers counts the signals sent (or merged into a pending one).
	triggers atomic.Int64
}

// watchConfig starts a configWatcher for path that sends on changed.
func watchConfig(ctx context.Context, path string, changed chan<- struct{}, log *slog.Logger) (*configWatcher, error) {
	cw := &configWatcher{path: path, debounce: ReloadDebounce, changed: changed, log: log}
	return cw, cw.start(ctx)
}

// relevant reports whether an event in the config's directory concerns
// the config: its own name (written, created, renamed over, removed), or
// the ConfigMap data link being swapped.
func (cw *configWatcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false // touch, chmod: the contents did not change
	}
	name := filepath.Clean(ev.Name)
	return name == filepath.Clean(cw.path) ||
		name == filepath.Join(filepath.Dir(cw.path), configMapData)
}

func (cw *configWatcher) start(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config watcher: %w", err)
	}
	dir := filepath.Dir(cw.path)
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("config watcher on %s: %w", dir, err)
	}
	go func() {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		signal := func() {
			cw.triggers.Add(1)
			select {
			case cw.changed <- struct{}{}:
			default: // a reload is already pending
			}
		}
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if !cw.relevant(ev) {
					continue
				}
				cw.log.Debug("config changed", "event", ev.String())
				if cw.debounce <= 0 {
					signal()
					continue
				}
				if timer == nil {
					timer = time.NewTimer(cw.debounce)
				} else {
					timer.Reset(cw.debounce)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				cw.log.Warn("config watcher", "err", err)
			case <-fire:
				fire = nil
				signal()
			}
		}
	}()
	return nil
}
