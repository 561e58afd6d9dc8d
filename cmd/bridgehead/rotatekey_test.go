package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// blockFixture is cliFixture's config with the gateways in block style, as
// bridgehead catalog writes them.
func blockFixture(t *testing.T) (cfg, key string) {
	t.Helper()
	cfg, key = cliFixture(t)
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	flow := regexp.MustCompile(`(?m)^      - \{name: (\S+), address: (\S+), endpoint: (\S+), publicKey: (\S+)\}$`)
	block := flow.ReplaceAllString(string(text), "      # the gateway\n      - name: $1\n        address: $2\n        endpoint: $3\n        publicKey: $4")
	if err := os.WriteFile(cfg, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, key
}

// TestRotateKey: rotate-key --write-config moves the key to
// previousPrivateKeyFile, writes a new one, and edits the config so that
// it checks clean with the rollover: the new publicKey, the old one as
// previousPublicKey until now+overlap, previousPrivateKeyFile. A second
// rotation replaces the previous-key lines instead of adding more. A
// config in flow style is refused, its keys rotated and the lines printed.
func TestRotateKey(t *testing.T) {
	cfgPath, keyPath := blockFixture(t)
	read := func(p string) bhcrypto.PrivateKey {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		k, err := bhcrypto.ParsePrivateKey(string(raw))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for round := range 2 {
		before := read(keyPath)
		start := time.Now()
		code, stdout, stderr := runCLI(t, "", "rotate-key", "--config", cfgPath, "--overlap", "2h", "--write-config")
		if code != 0 {
			t.Fatalf("round %d: rotate-key: exit %d: %s", round, code, stderr)
		}
		after, prev := read(keyPath), read(keyPath+".previous")
		if prev != before || after == before {
			t.Fatalf("round %d: key files: previous is the old key %v, new key differs %v", round, prev == before, after != before)
		}
		if info, _ := os.Stat(keyPath + ".previous"); info.Mode().Perm() != 0o600 {
			t.Fatalf("previous key file mode %v", info.Mode().Perm())
		}
		cfg, problems, _, err := config.CheckFile(cfgPath, config.CheckOptions{})
		if err != nil || len(problems) > 0 {
			t.Fatalf("round %d: edited config: %v %v", round, err, problems)
		}
		g := cfg.LocalGateway()
		if g.PublicKey != after.PublicKey().String() || g.PreviousPublicKey != before.PublicKey().String() {
			t.Fatalf("round %d: config lists %s, previous %s", round, g.PublicKey, g.PreviousPublicKey)
		}
		if d := g.PreviousKeyExpires.Sub(start); d < 2*time.Hour-time.Second || d > 2*time.Hour+time.Minute {
			t.Fatalf("round %d: previousKeyExpires %v is not 2h from now", round, g.PreviousKeyExpires)
		}
		if cfg.PreviousPrivateKeyFile != "a.key.previous" {
			t.Fatalf("previousPrivateKeyFile = %q", cfg.PreviousPrivateKeyFile)
		}
		if !strings.Contains(stdout, "previousPublicKey: "+before.PublicKey().String()) {
			t.Fatalf("output does not give the peers' lines:\n%s", stdout)
		}
		text, _ := os.ReadFile(cfgPath)
		if n := strings.Count(string(text), "previousPublicKey:"); n != 1 {
			t.Fatalf("round %d: %d previousPublicKey lines", round, n)
		}
		if !strings.Contains(string(text), "# the gateway") {
			t.Fatal("the edit lost a comment")
		}
	}

	flowCfg, flowKey := cliFixture(t)
	old := read(flowKey)
	code, stdout, stderr := runCLI(t, "", "rotate-key", "--config", flowCfg, "--write-config")
	if code == 0 || !strings.Contains(stderr, "not this gateway's publicKey in block style") || !strings.Contains(stderr, "edit the config by hand") {
		t.Fatalf("flow style: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	if read(filepath.Join(filepath.Dir(flowKey), "a.key.previous")) != old {
		t.Fatal("flow style: the old key is not in the previous key file")
	}
	code, stdout, _ = runCLI(t, "", "rotate-key", "--config", flowCfg)
	if code != 0 || !strings.Contains(stdout, "previousPrivateKeyFile: a.key.previous") {
		t.Fatalf("without --write-config: exit %d, stdout %q", code, stdout)
	}
}
