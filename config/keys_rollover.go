package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Key rollover and preshared keys: the fields, their decoding and their
// checks (the rest of the config code only calls in here).
//
// A gateway's own entry in sites lists its current publicKey and, during
// a rollover, its previousPublicKey with previousKeyExpires: every peer
// accepts handshakes made with the previous key until then. The gateway
// itself keeps the previous private key in previousPrivateKeyFile and
// answers handshakes made to it until the same time (or, when its entry
// does not list it yet, keyOverlap after the file was written).
//
// presharedKeys names one file per remote site: the site pair's
// preshared keys, one or two base64 lines, the first used to answer.

// DefaultKeyOverlap is keyOverlap's default, the same as the router's
// (crypto.DefaultKeyOverlap; a daemon test keeps them equal): a day, so
// every peer learns the new key, even one that was down overnight, while
// a retired key stops working soon.
const DefaultKeyOverlap = 24 * time.Hour

// Bounds of keyOverlap.
const (
	MinKeyOverlap = 5 * time.Second // tests; operators keep the default
	MaxKeyOverlap = 30 * 24 * time.Hour
)

// PresharedKeyRef is one entry of presharedKeys: the file holding the
// preshared keys this gateway shares with the gateways of Site.
type PresharedKeyRef struct {
	// Site is the remote site the keys are shared with.
	Site string `yaml:"site"`
	// File holds the pair's preshared keys, one or two base64 lines, the
	// first used to answer; relative to the config file unless absolute.
	File string `yaml:"file"`
}

// maxPresharedKeys is crypto.MaxPresharedKeys: the key in use and, during
// a rotation, the other one.
const maxPresharedKeys = 2

// KeyOverlapOrDefault is keyOverlap or DefaultKeyOverlap.
func (c *Config) KeyOverlapOrDefault() time.Duration {
	if c.KeyOverlap == 0 {
		return DefaultKeyOverlap
	}
	return c.KeyOverlap
}

// PreviousPrivateKeyPath is PreviousPrivateKeyFile resolved like
// PrivateKeyPath.
func (c *Config) PreviousPrivateKeyPath() string { return c.relPath(c.PreviousPrivateKeyFile) }

// PresharedKeyPath is a presharedKeys file resolved like PrivateKeyPath.
func (c *Config) PresharedKeyPath(ref PresharedKeyRef) string { return c.relPath(ref.File) }

func (c *Config) relPath(p string) string {
	if p == "" || filepath.IsAbs(p) || c.Path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.Path), p)
}

// time decodes an RFC 3339 time.
func (d *decoder) time(dst *time.Time) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			d.errorAt(n.Line, path, "%q is not an RFC 3339 time (want e.g. 2026-01-02T15:04:05Z)", s)
			return
		}
		*dst = t
	}
}

// presharedKeys decodes the presharedKeys list.
func (d *decoder) presharedKeys(dst *[]PresharedKeyRef) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		d.sequence(n, path, func(n *yaml.Node, path string) {
			var ref PresharedKeyRef
			d.mapping(n, path, []field{
				{"site", d.str(&ref.Site)},
				{"file", d.str(&ref.File)},
			})
			*dst = append(*dst, ref)
		})
	}
}

// checkKeyRollover: a previousPublicKey is a valid key, not the gateway's
// publicKey nor any gateway's key, and comes with previousKeyExpires (and
// that only with it); every presharedKeys entry names a remote site once,
// and a file.
func checkKeyRollover(c *Config, r *reporter) {
	seen := map[string]string{}
	for _, s := range c.Sites {
		for _, g := range s.Gateways {
			if b, err := parsePublicKey(g.PublicKey); err == nil {
				seen[string(b)] = g.Name
			}
		}
	}
	for i, s := range c.Sites {
		for j, g := range s.Gateways {
			path := gatewayPath(i, j, "previousPublicKey")
			if g.PreviousPublicKey == "" {
				if !g.PreviousKeyExpires.IsZero() {
					r.errorf(gatewayPath(i, j, "previousKeyExpires"), "is set without previousPublicKey")
				}
				continue
			}
			b, err := parsePublicKey(g.PreviousPublicKey)
			if err != nil {
				r.errorf(path, "%q %v", g.PreviousPublicKey, err)
				continue
			}
			if owner, dup := seen[string(b)]; dup {
				r.errorf(path, "is the key of gateway %q: a previous key must be retired, not in use", owner)
				continue
			}
			seen[string(b)] = g.Name
			exp := gatewayPath(i, j, "previousKeyExpires")
			if _, written := r.lines[exp]; !written && g.PreviousKeyExpires.IsZero() {
				r.errorf(exp, "is required with previousPublicKey: when peers stop accepting it (bridgehead rotate-key prints it)")
			}
		}
	}
	sites := map[string]int{}
	for i, ref := range c.PresharedKeys {
		path := indexPath("presharedKeys", i)
		switch s := c.siteByName(ref.Site); {
		case ref.Site == "":
			r.errorf(joinPath(path, "site"), "is required: the remote site these keys are shared with")
		case s == nil:
			r.errorf(joinPath(path, "site"), "%q is not the name of any site", ref.Site)
		case ref.Site == c.Site:
			r.errorf(joinPath(path, "site"), "%q is this gateway's own site", ref.Site)
		}
		if first, dup := sites[ref.Site]; dup && ref.Site != "" {
			r.errorf(joinPath(path, "site"), "%q is listed twice (first presharedKeys[%d])", ref.Site, first)
		}
		sites[ref.Site] = i
		if ref.File == "" {
			r.errorf(joinPath(path, "file"), "is required: the file holding the site pair's preshared keys")
		}
	}
}

func (c *Config) siteByName(name string) *Site {
	for i := range c.Sites {
		if c.Sites[i].Name == name {
			return &c.Sites[i]
		}
	}
	return nil
}

// checkKeyFiles: previousPrivateKeyFile and the presharedKeys files exist,
// are readable by their owner only, and parse; the previous private key
// belongs to the previousPublicKey the local gateway's entry lists.
func checkKeyFiles(c *Config, r *reporter, opts CheckOptions) {
	if c.PreviousPrivateKeyFile != "" {
		const field = "previousPrivateKeyFile"
		if data, ok := readSecretFile(c.PreviousPrivateKeyPath(), field, "key", r, opts); ok {
			pub, err := parsePrivateKey(data)
			switch g := c.LocalGateway(); {
			case err != nil:
				r.errorf(field, "the key in %s %v", c.PreviousPrivateKeyPath(), err)
			case g == nil || g.PreviousPublicKey == "":
				if !c.Follows() && c.Kubernetes == nil {
					r.warnf(field, "this gateway's entry lists no previousPublicKey: peers refuse the previous key (run bridgehead rotate-key, or add it)")
				}
			default:
				listed, err := parsePublicKey(g.PreviousPublicKey)
				if err == nil && !bytes.Equal(listed, pub) {
					r.errorf(field, "the key in %s has public key %s, but this gateway's previousPublicKey is %s",
						c.PreviousPrivateKeyPath(), base64.StdEncoding.EncodeToString(pub), g.PreviousPublicKey)
				}
			}
		}
	}
	for i, ref := range c.PresharedKeys {
		if ref.File == "" {
			continue
		}
		field := joinPath(indexPath("presharedKeys", i), "file")
		data, ok := readSecretFile(c.PresharedKeyPath(ref), field, "key", r, opts)
		if !ok {
			continue
		}
		if _, err := ParsePresharedKeys(data); err != nil {
			r.errorf(field, "%s: %v", c.PresharedKeyPath(ref), err)
		}
	}
}

// readSecretFile reads a key file for checkPrivateKey and checkKeyFiles,
// reporting a missing file, another kind of file, or one group or others
// can access (what names the key in that message). As ssh does: a key
// others could have read may be known to them.
func readSecretFile(path, field, what string, r *reporter, opts CheckOptions) ([]byte, bool) {
	stat, read := os.Stat, os.ReadFile
	if opts.Stat != nil {
		stat = opts.Stat
	}
	if opts.ReadFile != nil {
		read = opts.ReadFile
	}
	info, err := stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			r.errorf(field, "%s does not exist", path)
		} else {
			r.errorf(field, "%v", err)
		}
		return nil, false
	}
	if !info.Mode().IsRegular() {
		r.errorf(field, "%s is not a regular file", path)
		return nil, false
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		r.errorf(field, "%s has mode %04o: group or others can access the %s; run chmod 600 %s", path, perm, what, path)
	}
	data, err := read(path)
	if err != nil {
		r.errorf(field, "%v", err)
		return nil, false
	}
	return data, true
}

// ParsePresharedKeys parses a preshared-key file: one standard base64
// 32-byte key per line, blank lines and '#' comments ignored, one or two
// keys, none twice, none all zero. It returns the raw keys, first the one
// that answers handshakes. The format is crypto.ParsePresharedKeys'; this
// copy keeps package config free of the crypto package.
func ParsePresharedKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := decodeKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: the key %v", i+1, err)
		}
		if isZero(k) {
			return nil, fmt.Errorf("line %d: the key is all zero", i+1)
		}
		for _, o := range keys {
			if bytes.Equal(o, k) {
				return nil, fmt.Errorf("line %d: the same key twice", i+1)
			}
		}
		if len(keys) == maxPresharedKeys {
			return nil, fmt.Errorf("line %d: more than %d keys", i+1, maxPresharedKeys)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no preshared key in it")
	}
	return keys, nil
}
