// Package filewatch signals changes to one file, the way config files
// change in practice: editors replace them by rename, and Kubernetes
// ConfigMap volumes swap a symlink (..data) next to them.
package filewatch

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a Watcher waits after the last change to
// the file before signalling, so an editor's burst of writes and renames
// becomes one signal.
const DefaultDebounce = 250 * time.Millisecond

// configMapData is the symlink a Kubernetes ConfigMap volume swaps
// atomically on every update; the files themselves are links through it.
const configMapData = "..data"

// Watcher watches the directory holding a file and signals after each
// burst of changes to the file itself. It watches the directory, not the
// file: editors replace files by rename, and Kubernetes ConfigMap mounts
// swap a symlink (..data) next to the file, so the file's own inode is not
// where changes show up. Every other event in the directory — a log file,
// a CPU profile, a control socket, anything an operator keeps there — is
// ignored, so an idle process stays idle whatever shares its directory.
//
// Its goroutine owns the fsnotify watcher and the timer; Triggers may be
// read from any goroutine.
type Watcher struct {
	path     string
	debounce time.Duration
	changed  chan<- struct{}
	log      *slog.Logger
	// triggers counts the signals sent (or merged into a pending one).
	triggers atomic.Int64
}

// Start watches path until ctx ends. After each burst of changes it
// sends on changed without blocking (a signal already pending absorbs the
// new one), debounce after the last event (zero: at every event).
func Start(ctx context.Context, path string, debounce time.Duration, changed chan<- struct{}, log *slog.Logger) (*Watcher, error) {
	w := &Watcher{path: path, debounce: debounce, changed: changed, log: log}
	return w, w.start(ctx)
}

// Triggers is the number of signals sent so far.
func (w *Watcher) Triggers() int64 { return w.triggers.Load() }

// relevant reports whether an event in the file's directory concerns the
// file: its own name (written, created, renamed over, removed), or the
// ConfigMap data link being swapped.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false // touch, chmod: the contents did not change
	}
	name := filepath.Clean(ev.Name)
	return name == filepath.Clean(w.path) ||
		name == filepath.Join(filepath.Dir(w.path), configMapData)
}

func (w *Watcher) start(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file watcher: %w", err)
	}
	dir := filepath.Dir(w.path)
	if err := fw.Add(dir); err != nil {
		fw.Close()
		return fmt.Errorf("file watcher on %s: %w", dir, err)
	}
	go func() {
		defer fw.Close()
		var timer *time.Timer
		var fire <-chan time.Time
		signal := func() {
			w.triggers.Add(1)
			select {
			case w.changed <- struct{}{}:
			default: // a signal is already pending
			}
		}
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				if !w.relevant(ev) {
					continue
				}
				w.log.Debug("file changed", "path", w.path, "event", ev.String())
				if w.debounce <= 0 {
					signal()
					continue
				}
				if timer == nil {
					timer = time.NewTimer(w.debounce)
				} else {
					timer.Reset(w.debounce)
				}
				fire = timer.C
			case err, ok := <-fw.Errors:
				if !ok {
					return
				}
				w.log.Warn("file watcher", "path", w.path, "err", err)
			case <-fire:
				fire = nil
				signal()
			}
		}
	}()
	return nil
}
