package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// rotate-key: give a gateway a new static key while its old one keeps
// working for an overlap (docs/operations/key-rotation.md). It writes
// the running key to previousPrivateKeyFile and a new one to
// privateKeyFile, and prints the catalog lines its peers need; with
// --write-config it also writes them into the config file, whose reload
// (the file watch, or SIGHUP) applies the rotation without a restart.

func setupRotateKey(fs *flag.FlagSet) action {
	cfgPath := fs.String("config", defaultConfig, "the gateway's config `FILE`")
	overlap := fs.Duration("overlap", 0, "how long peers keep accepting the old key (default: the config's keyOverlap, 24h)")
	write := fs.Bool("write-config", false, "also write the rotation into FILE: this gateway's publicKey, previousPublicKey and previousKeyExpires, and previousPrivateKeyFile")
	return noArgs(func(std *stdio) error {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return configError(fs, err)
		}
		r, err := rotateKey(cfg, *overlap, time.Now())
		if err != nil {
			return err
		}
		if *write {
			if err := writeRotation(cfg, r); err != nil {
				return fmt.Errorf("%s: %w (the new key is in %s, the old one in %s; edit the config by hand)", cfg.Path, err, r.keyPath, r.prevPath)
			}
		}
		return printRotation(std, cfg, r, *write)
	})
}

// rotation is what rotate-key did.
type rotation struct {
	next, prev       bhcrypto.PublicKey
	until            time.Time
	keyPath          string
	prevPath         string // previousPrivateKeyFile, resolved
	prevField        string // its value as the config writes it
	prevFieldWritten bool   // the config already names it
}

// rotateKey moves the key in privateKeyFile to previousPrivateKeyFile (by
// default privateKeyFile with ".previous" appended) and writes a new key
// to privateKeyFile, each replaced atomically.
func rotateKey(cfg *config.Config, overlap time.Duration, now time.Time) (*rotation, error) {
	if overlap == 0 {
		overlap = cfg.KeyOverlapOrDefault()
	}
	if overlap < config.MinKeyOverlap || overlap > config.MaxKeyOverlap {
		return nil, usageError{fmt.Errorf("--overlap %v is out of range %v..%v", overlap, config.MinKeyOverlap, config.MaxKeyOverlap)}
	}
	r := &rotation{keyPath: cfg.PrivateKeyPath(), until: now.Add(overlap).Truncate(time.Second)}
	raw, err := os.ReadFile(r.keyPath)
	if err != nil {
		return nil, fmt.Errorf("%s: privateKeyFile: %w", cfg.Path, err)
	}
	old, err := bhcrypto.ParsePrivateKey(string(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: privateKeyFile %s: %w", cfg.Path, r.keyPath, err)
	}
	next, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	r.prevField, r.prevFieldWritten = cfg.PreviousPrivateKeyFile, cfg.PreviousPrivateKeyFile != ""
	if !r.prevFieldWritten {
		r.prevField = cfg.PrivateKeyFile + ".previous"
	}
	r.prevPath = cfg.PreviousPrivateKeyPath()
	if !r.prevFieldWritten {
		r.prevPath = r.keyPath + ".previous"
	}
	// The old key first: should the second write fail, the gateway still
	// has its running key where it looks for it.
	if err := writeKeyFile(r.prevPath, old.String()+"\n", true); err != nil {
		return nil, err
	}
	if err := writeKeyFile(r.keyPath, next.String()+"\n", true); err != nil {
		return nil, err
	}
	r.next, r.prev = next.PublicKey(), old.PublicKey()
	return r, nil
}

func printRotation(std *stdio, cfg *config.Config, r *rotation, written bool) error {
	fmt.Fprintf(std.out, "new key:      %s (in %s)\n", r.next, r.keyPath)
	fmt.Fprintf(std.out, "previous key: %s (in %s), accepted until %s\n", r.prev, r.prevPath, r.until.UTC().Format(time.RFC3339))
	if written {
		fmt.Fprintf(std.out, "%s updated: its reload applies the rotation; every peer's catalog needs the same lines for gateway %s:\n", cfg.Path, cfg.Gateway)
	} else {
		fmt.Fprintf(std.out, "in this gateway's entry (site %s, gateway %s) of every catalog, this gateway's own config included:\n", cfg.Site, cfg.Gateway)
	}
	fmt.Fprintf(std.out, "  publicKey: %s\n  previousPublicKey: %s\n  previousKeyExpires: %s\n", r.next, r.prev, r.until.UTC().Format(time.RFC3339))
	if !written && !r.prevFieldWritten {
		fmt.Fprintf(std.out, "and in this gateway's config:\n  previousPrivateKeyFile: %s\n", r.prevField)
	}
	return nil
}

// gatewayKeyLine matches the publicKey line of a gateway entry in block
// style, as `bridgehead catalog` and the examples write it.
var gatewayKeyLine = regexp.MustCompile(`^(\s*)(- )?publicKey:\s*(\S+)\s*$`)

// writeRotation writes r into the config file: the local gateway's
// publicKey becomes the new key, followed by previousPublicKey and
// previousKeyExpires (replacing earlier ones), and previousPrivateKeyFile
// follows privateKeyFile when the file does not name it yet. Lines are
// edited in place, so comments and layout stay; the result must parse
// before it replaces the file.
func writeRotation(cfg *config.Config, r *rotation) error {
	if cfg.Follows() || cfg.LocalGateway() == nil {
		return errors.New("this gateway's catalog entry is not in the config file (it follows a catalog)")
	}
	data, err := os.ReadFile(cfg.Path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(data), "\n")
	si, gi := localIndexes(cfg)
	gw := fmt.Sprintf("sites[%d].gateways[%d].", si, gi)
	keyLine := cfg.Line(gw + "publicKey")
	if keyLine < 1 || keyLine > len(lines) {
		return errors.New("cannot find this gateway's publicKey line")
	}
	m := gatewayKeyLine.FindStringSubmatch(lines[keyLine-1])
	if m == nil || m[3] != cfg.LocalGateway().PublicKey {
		return fmt.Errorf("line %d is not this gateway's publicKey in block style", keyLine)
	}
	indent := m[1]
	if m[2] != "" {
		indent += "  "
	}
	// Drop earlier previous-key lines of this gateway (bottom up).
	var drop []int
	for _, f := range []string{"previousPublicKey", "previousKeyExpires"} {
		if l := cfg.Line(gw + f); l > keyLine && l <= len(lines) && strings.HasPrefix(strings.TrimSpace(lines[l-1]), f+":") {
			drop = append(drop, l)
		}
	}
	if len(drop) == 2 && drop[0] < drop[1] {
		drop[0], drop[1] = drop[1], drop[0]
	}
	for _, l := range drop {
		lines = append(lines[:l-1], lines[l:]...)
	}
	lines[keyLine-1] = strings.Replace(lines[keyLine-1], m[3], r.next.String(), 1)
	ins := []string{
		indent + "previousPublicKey: " + r.prev.String(),
		indent + "previousKeyExpires: " + r.until.UTC().Format(time.RFC3339),
	}
	lines = append(lines[:keyLine], append(ins, lines[keyLine:]...)...)
	if !r.prevFieldWritten {
		l := cfg.Line("privateKeyFile")
		if l < 1 || l >= keyLine || !strings.HasPrefix(lines[l-1], "privateKeyFile:") {
			return errors.New("cannot find the privateKeyFile line")
		}
		lines = append(lines[:l], append([]string{"previousPrivateKeyFile: " + r.prevField}, lines[l:]...)...)
	}
	out := []byte(strings.Join(lines, "\n"))
	if _, err := config.Parse(cfg.Path, out); err != nil {
		return fmt.Errorf("the edited config does not parse: %w", err)
	}
	info, err := os.Stat(cfg.Path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(cfg.Path), "."+filepath.Base(cfg.Path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(out)
	if err == nil {
		err = tmp.Chmod(info.Mode().Perm())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), cfg.Path)
}

// localIndexes returns the indexes of the local site and gateway in cfg.
func localIndexes(cfg *config.Config) (site, gw int) {
	for i, s := range cfg.Sites {
		if s.Name != cfg.Site {
			continue
		}
		for j, g := range s.Gateways {
			if g.Name == cfg.Gateway {
				return i, j
			}
		}
	}
	return -1, -1
}
