package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// resolveTimeout bounds the lookup of one gateway endpoint hostname.
const resolveTimeout = 5 * time.Second

// loader carries what Parse needs from the outside world, so tests can
// replace name resolution.
type loader struct {
	lookupHost func(ctx context.Context, host string) ([]string, error)
}

func defaultLoader() loader {
	return loader{lookupHost: net.DefaultResolver.LookupHost}
}

// Load reads and parses the file at path. See Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes data, the contents of the file at path, applies defaults
// and checks what the daemon needs to run: references to the local site
// and gateway, cipher, listen address, CIDR syntax, gateway endpoints
// (hostnames are resolved now) and public keys, unique names, interface
// name and MTU. Any error is an ErrorList holding every problem found,
// each naming file, line and field. The full address-plan check is Check.
func Parse(path string, data []byte) (*Config, error) {
	return defaultLoader().parse(path, data)
}

func (l loader) parse(path string, data []byte) (*Config, error) {
	c, errs := l.parseAll(path, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// parseAll decodes and validates like parse but also returns what decoded
// when there were problems (nil only if the YAML itself did not parse).
func (l loader) parseAll(path string, data []byte) (*Config, ErrorList) {
	sum := sha256.Sum256(data)
	c := &Config{Path: path, hash: hex.EncodeToString(sum[:])[:12]}
	d := &decoder{reporter{file: path, lines: map[string]int{}}}

	root, ok := d.document(data)
	if !ok {
		return nil, d.errs.sorted()
	}
	d.lines[""] = root.Line
	d.config(root, c)
	c.lines = d.lines

	applyDefaults(c)
	validateBasic(c, &d.reporter, l)
	if len(d.errs) > 0 {
		return c, d.errs.sorted()
	}
	return c, nil
}

// document parses data into the root node of its single YAML document.
func (d *decoder) document(data []byte) (*yaml.Node, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorAt(1, "", "file is empty")
		} else {
			d.yamlError(err, data)
		}
		return nil, false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.yamlError(err, data)
		return nil, false
	default:
		d.errorAt(extra.Line, "", "more than one YAML document in the file")
		return nil, false
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || isNull(deref(doc.Content[0])) {
		d.errorAt(max(doc.Line, 1), "", "file is empty")
		return nil, false
	}
	return doc.Content[0], true
}

// yamlError turns a yaml.v3 syntax error into an Error with its line.
// yaml.v3 reports parser errors ("did not find expected ...") and the tab
// error at the 0-based line of their context, one less than the line of
// the problem, and some errors without a line: both are corrected here.
func (d *decoder) yamlError(err error, data []byte) {
	msg, line := strings.TrimPrefix(err.Error(), "yaml: "), 1
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil && n > 0 {
				line, msg = n, text
				if strings.HasPrefix(text, "did not find expected") || strings.HasPrefix(text, "found a tab character") {
					line++
				}
			}
		}
	} else if name, ok := strings.CutPrefix(msg, "unknown anchor '"); ok {
		name, _, _ = strings.Cut(name, "'")
		for i, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "*"+name) {
				line = i + 1
				break
			}
		}
	}
	d.errorAt(line, "", "invalid YAML: %s", msg)
}

// applyDefaults fills in fields the file left out.
func applyDefaults(c *Config) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Cipher == "" {
		c.Cipher = DefaultCipher
	}
	if c.Interface.Name == "" {
		c.Interface.Name = DefaultInterfaceName
	}
	if c.Interface.MTU == (MTU{}) {
		c.Interface.MTU = MTU{Value: DefaultMTU}
	}
	if c.Cluster.Name == "" {
		c.Cluster.Name = DefaultClusterName
	}
	if c.Metrics.ReadyWindow == 0 {
		c.Metrics.ReadyWindow = DefaultReadyWindow
	}
	relayDefaults(c.Relay)
}

// Hash identifies the file contents: the first 12 hex digits of their
// SHA-256. It is empty for a Config not made by Parse.
func (c *Config) Hash() string {
	return c.hash
}

// SiteByName returns the site called name, or nil.
func (c *Config) SiteByName(name string) *Site {
	for i := range c.Sites {
		if c.Sites[i].Name == name {
			return &c.Sites[i]
		}
	}
	return nil
}

// LocalSite returns the site this gateway belongs to (Config.Site).
func (c *Config) LocalSite() *Site {
	return c.SiteByName(c.Site)
}

// LocalGateway returns this gateway (Config.Gateway of the local site).
func (c *Config) LocalGateway() *Gateway {
	s := c.LocalSite()
	if s == nil {
		return nil
	}
	return s.GatewayByName(c.Gateway)
}

// GatewayByName returns the gateway of s called name, or nil.
func (s *Site) GatewayByName(name string) *Gateway {
	for i := range s.Gateways {
		if s.Gateways[i].Name == name {
			return &s.Gateways[i]
		}
	}
	return nil
}

// EarlyDropEnabled reports whether the kernel early-drop filter should be
// attached (the default).
func (c *Config) EarlyDropEnabled() bool {
	return c.EarlyDrop == nil || *c.EarlyDrop
}

// ClampMSSEnabled reports whether TCP MSS clamping is on (the default).
func (c *Config) ClampMSSEnabled() bool {
	return c.ClampMSS == nil || *c.ClampMSS
}

// PrivateKeyPath is PrivateKeyFile with a relative path taken relative to
// the directory of the config file. Empty when PrivateKeyFile is.
func (c *Config) PrivateKeyPath() string {
	p := c.PrivateKeyFile
	if p == "" || filepath.IsAbs(p) || c.Path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.Path), p)
}

// Line returns the line of the value at a field path such as
// "sites[1].podCIDRs[0]", or of its closest enclosing value when the
// field is absent; 0 for a Config not made by Parse.
func (c *Config) Line(field string) int {
	return lineOf(c.lines, field)
}

// String returns "auto" or the number.
func (m MTU) String() string {
	if m.Auto {
		return "auto"
	}
	return strconv.Itoa(m.Value)
}
