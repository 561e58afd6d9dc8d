package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// ReloadDebounce is how long the watcher waits after the last change in
// the config's directory before reloading, so an editor's burst of
// writes and renames becomes one reload.
const ReloadDebounce = 250 * time.Millisecond

// watchConfig watches the directory holding path and sends on changed
// after each burst of changes. It watches the directory, not the file:
// editors replace files by rename, and Kubernetes ConfigMap mounts swap a
// symlink (..data) next to the file, so the file's own inode is not
// where changes show up. Any event in the directory triggers; reload
// compares the file's hash and ignores no-ops.
func watchConfig(ctx context.Context, path string, changed chan<- struct{}, log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config watcher: %w", err)
	}
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("config watcher on %s: %w", dir, err)
	}
	go func() {
		defer w.Close()
		var timer *time.Timer
		var fire <-chan time.Time
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
				log.Debug("config directory changed", "event", ev.String())
				if timer == nil {
					timer = time.NewTimer(ReloadDebounce)
				} else {
					timer.Reset(ReloadDebounce)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("config watcher", "err", err)
			case <-fire:
				fire = nil
				select {
				case changed <- struct{}{}:
				default: // a reload is already pending
				}
			}
		}
	}()
	return nil
}
