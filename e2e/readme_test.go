package e2e

import (
	"bytes"
	"crypto/rand"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/internal/mdblock"
)

// TestReadmeCommands runs, as a newcomer would, the shell blocks of the
// product docs (README.md, docs/**/*.md) marked
// <!-- runs-in: TestReadmeCommands -->, file by file and in order, from
// the repository root, with /etc/bridgehead moved to a temporary
// directory that does not exist yet. Between the blocks it writes the
// file's first whole config example as /etc/bridgehead/bridgehead.yaml,
// with the public key the blocks printed for this gateway (the
// newcomer's editing step). As in one terminal, what a block exports
// stays set for the blocks after it in the same file.
func TestReadmeCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make build")
	}
	root := repoRoot(t)
	files, err := productDocs(root)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, file := range files {
		blocks, err := mdblock.Read(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		var example string
		var run []mdblock.Block
		for _, b := range blocks {
			if b.Lang == "yaml" && example == "" && b.Marker == "" {
				example = b.Text
			}
			if b.Marker == "runs-in" && b.Arg == "TestReadmeCommands" {
				run = append(run, b)
			}
		}
		if len(run) == 0 {
			continue
		}
		if example == "" {
			t.Fatalf("%s: %d blocks marked runs-in TestReadmeCommands, but no whole config example", file, len(run))
		}
		t.Run(file, func(t *testing.T) { runDocBlocks(t, root, example, run) })
		ran++
	}
	if ran == 0 {
		t.Fatal("no product doc has a block marked runs-in TestReadmeCommands")
	}
}

// productDocs lists README.md and docs/**/*.md but docs/conformance/ and
// docs/benchmarks-history.md, relative to root (as
// cmd/bridgehead/readme_test.go's docFiles).
func productDocs(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel == "docs/conformance" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(rel, ".md") && rel != "docs/benchmarks-history.md" {
			files = append(files, rel)
		}
		return nil
	})
	sort.Strings(files[1:])
	return files, err
}

// runDocBlocks runs one file's blocks in order, as one terminal would.
func runDocBlocks(t *testing.T, root, example string, run []mdblock.Block) {
	etc := filepath.Join(t.TempDir(), "etc", "bridgehead")
	cfgPath := filepath.Join(etc, "bridgehead.yaml")
	var stdout bytes.Buffer
	var exports strings.Builder // the export lines of the blocks run so far
	for _, b := range run {
		if _, err := os.Stat(cfgPath); err != nil && strings.Contains(b.Text, "/etc/bridgehead/bridgehead.yaml") {
			writeReadmeConfig(t, example, etc, lastLine(stdout.String()))
		}
		script := strings.ReplaceAll(b.Text, "/etc/bridgehead", etc)
		c := exec.Command("sh", "-e", "-c", exports.String()+script)
		for _, line := range strings.Split(script, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "export ") {
				exports.WriteString(line + "\n")
			}
		}
		c.Dir = root
		stdout.Reset()
		var stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Run(); err != nil {
			t.Fatalf("%s: %v\n%s\nstdout:\n%s\nstderr:\n%s", b, err, script, stdout.String(), stderr.String())
		}
		if s := stderr.String(); strings.Contains(s, "warning") || strings.Contains(s, "WARN") {
			t.Errorf("%s warns:\n%s", b, s)
		}
		t.Logf("%s:\n%s", b, stdout.String())
	}
	for path, want := range map[string]os.FileMode{etc: 0o700, filepath.Join(etc, "private.key"): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatalf("the doc's commands did not create %s: %v", path, err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", path, st.Mode().Perm(), want)
		}
	}
	if _, err := os.Stat(cfgPath); err != nil {
		t.Fatal("no block used the config")
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// writeReadmeConfig writes the README's config example to etc with the
// local gateway's publicKey set to pub (what the README's pubkey command
// printed) and generated keys for the other gateways.
func writeReadmeConfig(t *testing.T, example, etc, pub string) {
	t.Helper()
	if _, err := bhcrypto.ParsePublicKey(pub); err != nil {
		t.Fatalf("the README's commands did not print a public key before using the config (last line %q): %v", pub, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(example), &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	site, gateway := yamlField(root, "site").Value, yamlField(root, "gateway").Value
	for _, s := range yamlField(root, "sites").Content {
		for _, g := range yamlField(s, "gateways").Content {
			key := yamlField(g, "publicKey")
			if yamlField(s, "name").Value == site && yamlField(g, "name").Value == gateway {
				key.Value = pub
				continue
			}
			k, err := bhcrypto.GeneratePrivateKey(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			key.Value = k.PublicKey().String()
		}
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	out = bytes.ReplaceAll(out, []byte("/etc/bridgehead"), []byte(etc))
	if err := os.WriteFile(filepath.Join(etc, "bridgehead.yaml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
}

func yamlField(m *yaml.Node, key string) *yaml.Node {
	for i := 0; m != nil && i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return &yaml.Node{}
}
