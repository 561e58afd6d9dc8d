package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRefusesReadableKey: as ssh does, Run refuses to start with a
// private key file that group or others can read, before it touches the
// kernel, and the error says how to fix it.
func TestRunRefusesReadableKey(t *testing.T) {
	l := newLabAB(t)
	path, key := l.path, filepath.Join(l.dir, "a.key")
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), Options{ConfigPath: path})
	if err == nil {
		t.Fatal("Run started with a group-readable private key")
	}
	for _, want := range []string{"refusing to start", "has mode 0640", "run chmod 600 " + key} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}
