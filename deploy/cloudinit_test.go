package deploy

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

const cloudInitPath = "cloud-init/gateway.yaml"

type cloudConfig struct {
	WriteFiles []struct {
		Path        string `yaml:"path"`
		Owner       string `yaml:"owner"`
		Permissions string `yaml:"permissions"`
		Encoding    string `yaml:"encoding"`
		Content     string `yaml:"content"`
	} `yaml:"write_files"`
	RunCmd [][]string `yaml:"runcmd"`
}

var placeholder = regexp.MustCompile(`@@[A-Z0-9_]+@@`)

// renderCloudInit fills the placeholders the way the Azure template does.
func renderCloudInit(t *testing.T, src string, values map[string]string) string {
	t.Helper()
	for k, v := range values {
		src = strings.ReplaceAll(src, k, v)
	}
	if left := placeholder.FindAllString(src, -1); len(left) > 0 {
		t.Fatalf("placeholders left after rendering: %q", left)
	}
	return src
}

func TestCloudInit(t *testing.T) {
	raw, err := os.ReadFile(cloudInitPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), "#cloud-config\n") {
		t.Fatal("first line is not #cloud-config")
	}
	example, err := os.ReadFile("package/bridgehead.yaml.example")
	if err != nil {
		t.Fatal(err)
	}
	key, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Real values exercise the quoting: base64 keys hold + / =.
	rendered := renderCloudInit(t, string(raw), map[string]string{
		"@@DEB_URL@@":     "https://example.com/bridgehead_1.2.3_amd64.deb",
		"@@DEB_SHA256@@":  strings.Repeat("ab", 32),
		"@@PRIVATE_KEY@@": key.String(),
		"@@CONFIG_B64@@":  base64.StdEncoding.EncodeToString(example),
	})
	var cc cloudConfig
	if err := yaml.Unmarshal([]byte(rendered), &cc); err != nil {
		t.Fatalf("rendered cloud-init is not YAML: %v", err)
	}
	files := map[string]int{}
	for i, f := range cc.WriteFiles {
		files[f.Path] = i
	}
	get := func(path string) (string, string) {
		i, ok := files[path]
		if !ok {
			t.Fatalf("write_files has no %s", path)
		}
		f := cc.WriteFiles[i]
		if f.Owner != "root:root" {
			t.Errorf("%s owner %q, want root:root", path, f.Owner)
		}
		c := f.Content
		if f.Encoding == "b64" {
			b, err := base64.StdEncoding.DecodeString(c)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			c = string(b)
		}
		return c, f.Permissions
	}

	// The key and config land where the unit and the example config
	// expect them, readable by root only.
	keyText, perm := get("/etc/bridgehead/private.key")
	if perm != "0600" {
		t.Errorf("private key permissions %q, want 0600", perm)
	}
	if k, err := bhcrypto.ParsePrivateKey(keyText); err != nil || k != key {
		t.Errorf("key file does not hold the key: %v", err)
	}
	cfgText, perm := get("/etc/bridgehead/bridgehead.yaml")
	if perm != "0600" {
		t.Errorf("config permissions %q, want 0600", perm)
	}
	if cfgText != string(example) {
		t.Error("config file does not round-trip through the b64 placeholder")
	}
	u := parseUnit(t, unitPath)
	if !strings.HasSuffix(u["Service"]["ExecStart"][0], "--config /etc/bridgehead/bridgehead.yaml") {
		t.Errorf("unit ExecStart %q does not read the config cloud-init writes", u["Service"]["ExecStart"])
	}
	cfg, err := config.Parse("/etc/bridgehead/bridgehead.yaml", []byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PrivateKeyPath() != "/etc/bridgehead/private.key" {
		t.Errorf("example config reads its key from %s, cloud-init writes /etc/bridgehead/private.key", cfg.PrivateKeyPath())
	}

	sysctl, _ := get("/etc/sysctl.d/90-bridgehead.conf")
	for _, want := range []string{"net.ipv4.ip_forward = 1", "net.ipv6.conf.all.forwarding = 1"} {
		if !strings.Contains(sysctl, want) {
			t.Errorf("sysctl file lacks %q", want)
		}
	}

	script, perm := get("/usr/local/sbin/bridgehead-bootstrap")
	if perm != "0700" {
		t.Errorf("bootstrap permissions %q, want 0700", perm)
	}
	for _, want := range []string{
		"set -eu",
		"sha256sum -c",
		"apt-get install -y",
		"bridgehead check --config /etc/bridgehead/bridgehead.yaml",
		"systemctl enable --now bridgehead.service",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("bootstrap script lacks %q", want)
		}
	}
	if i, j := strings.Index(script, "sha256sum -c"), strings.Index(script, "apt-get install"); i > j {
		t.Error("bootstrap installs the package before checking its hash")
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		p := filepath.Join(t.TempDir(), "bootstrap")
		if err := os.WriteFile(p, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(sh, "-n", p).CombinedOutput(); err != nil {
			t.Errorf("bootstrap script: sh -n: %v\n%s", err, out)
		}
	}
	if !slices.ContainsFunc(cc.RunCmd, func(c []string) bool { return slices.Equal(c, []string{"/usr/local/sbin/bridgehead-bootstrap"}) }) {
		t.Errorf("runcmd %q does not run the bootstrap script", cc.RunCmd)
	}
}
