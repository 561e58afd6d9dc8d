package daemon

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestStartAndReloadRefuseAlike: start-up and reload validate a config
// the same way (validate). A file that Run refuses, a running gateway's
// reload refuses too, with the same error naming file and field, and
// keeps its config; a file that reload refuses, Run refuses too.
func TestStartAndReloadRefuseAlike(t *testing.T) {
	l := newLabAB(t)
	keys, path, good := l.keys, l.path, mustRead(t, l.path)
	g, _ := l.startA(t)
	running := g.cfg.Load()

	cases := []struct {
		name    string
		content string
		want    []string // in both errors
	}{
		// Decoding problems and address-plan problems in one file: both
		// are reported, not the first kind alone.
		{"misspelled field and overlap", strings.Replace(strings.Replace(good, "mtu: 1420", "mtuu: 1420", 1),
			"10.102.0.0/16", "10.101.0.0/16", 1), []string{"a.yaml:", "interface.mtuu", "overlaps"}},
		{"key not the listed one", strings.Replace(good, keys.priv["a"].PublicKey().String(), keys.priv["c"].PublicKey().String(), 1),
			[]string{"a.yaml:", "privateKeyFile"}},
		{"preshared key file missing", good + "presharedKeys:\n  - {site: site-b, file: nowhere.psk}\n",
			[]string{"a.yaml:", "presharedKeys[0].file"}},
		{"unknown cipher", "cipher: rot13\n" + good, []string{"a.yaml:", "cipher"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			reloadErr := g.reload(path, "test")
			if g.cfg.Load() != running {
				t.Error("refused reload replaced the running config")
			}
			// Cancelled: a config Run wrongly accepts stops at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			startErr := Run(ctx, Options{ConfigPath: path})
			if startErr == nil || reloadErr == nil {
				t.Fatalf("start-up error %v, reload error %v: want both to refuse", startErr, reloadErr)
			}
			if want := "refusing to start with a bad config:\n" + reloadErr.Error(); startErr.Error() != want {
				t.Errorf("start-up and reload refuse differently:\nstart-up: %v\nreload:   %v", startErr, reloadErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(reloadErr.Error(), w) {
					t.Errorf("reload error does not say %q:\n%v", w, reloadErr)
				}
			}
		})
	}
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := g.reload(path, "test"); err != nil {
		t.Fatalf("the running config's own file: %v", err)
	}
}
