package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/internal/filewatch"
	"github.com/bridgehead/bridgehead/router"
)

// Key rollover and preshared keys in the daemon: which key files a config
// names, the router's key ring they make, and the peers' previous keys
// and preshared keys (router/keys.go has the protocol side).
//
// A reload applies a new private key (a new privateKeyFile, or new bytes
// in it) as a rotation: the running key becomes the previous one,
// answered until the local gateway's previousKeyExpires (when its entry
// lists that key) or keyOverlap from now. Sessions are kept. A reload
// whose config is unchanged but whose key files changed (SIGHUP after
// bridgehead rotate-key, a new preshared-key file) applies them too.

// keyFileDigest hashes the key files cfg names, so a reload can tell that
// they changed while the config did not. Unreadable files hash as empty:
// the reload that reads them reports the error.
func keyFileDigest(cfg *config.Config) [sha256.Size]byte {
	h := sha256.New()
	add := func(path string) {
		data, _ := os.ReadFile(path)
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(data))
		h.Write(data)
	}
	add(cfg.PrivateKeyPath())
	add(cfg.PreviousPrivateKeyPath())
	for _, ref := range cfg.PresharedKeys {
		add(cfg.PresharedKeyPath(ref))
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// peerKeys adds to rc what the peers' handshakes need besides their
// current key: each gateway's previous key and its end, and the
// preshared keys of each remote site (read from their files).
func peerKeys(rc *router.Config, cfg *config.Config) error {
	prev := map[[2]string]config.Gateway{}
	for _, s := range cfg.Sites {
		for _, g := range s.Gateways {
			if g.PreviousPublicKey != "" {
				prev[[2]string{s.Name, g.Name}] = g
			}
		}
	}
	psks := map[string][]bhcrypto.PresharedKey{}
	for i, ref := range cfg.PresharedKeys {
		keys, err := readPresharedKeys(cfg.PresharedKeyPath(ref))
		if err != nil {
			return fmt.Errorf("presharedKeys[%d].file: %w", i, err)
		}
		psks[ref.Site] = keys
	}
	for i := range rc.Sites {
		sc := &rc.Sites[i]
		for j := range sc.Gateways {
			pc := &sc.Gateways[j]
			pc.PresharedKeys = psks[sc.Name]
			g, ok := prev[[2]string{sc.Name, pc.Name}]
			if !ok {
				continue
			}
			key, err := bhcrypto.ParsePublicKey(g.PreviousPublicKey)
			if err != nil {
				return fmt.Errorf("site %s gateway %s: previousPublicKey: %w", sc.Name, pc.Name, err)
			}
			pc.PreviousPublicKey, pc.PreviousUntil = key, g.PreviousKeyExpires
		}
	}
	return nil
}

func readPresharedKeys(path string) ([]bhcrypto.PresharedKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := bhcrypto.ParsePresharedKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// keyRing is the ring cfg's key files make, given the running one (nil at
// start) at now. The current key is privateKeyFile's (identity). The
// previous one is, in this order: previousPrivateKeyFile's key; else,
// when the current key changed, the running current key. It is answered
// until the local gateway's previousKeyExpires when its entry lists that
// key, else until keyOverlap after previousPrivateKeyFile was written
// (bridgehead rotate-key writes it at the rotation) or, for a key rotated
// by this reload, after now. A previous key past its end is left out.
// Errors name the config file and field.
func keyRing(cfg *config.Config, running *bhcrypto.KeyRing, now time.Time) (*bhcrypto.KeyRing, error) {
	all, err := lastRotation(cfg, running, now)
	if err != nil {
		return nil, err
	}
	return all.Expire(now), nil
}

// lastRotation is keyRing with the previous key kept after its overlap:
// the last rotation, whose signature the Gateway status keeps showing
// (registerStatus) so that a key the old one vouched for stays vouched
// for while spec pins the old one.
func lastRotation(cfg *config.Config, running *bhcrypto.KeyRing, now time.Time) (*bhcrypto.KeyRing, error) {
	cur, err := identity(cfg)
	if err != nil {
		return nil, err
	}
	ring := bhcrypto.NewKeyRing(cur)
	if running != nil && running.Current.Public == cur.Public {
		ring = &bhcrypto.KeyRing{Current: running.Current, Previous: running.Previous, PreviousUntil: running.PreviousUntil}
	}
	var prev *bhcrypto.Identity
	var written time.Time
	if p := cfg.PreviousPrivateKeyPath(); p != "" {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("%s: previousPrivateKeyFile: %w", cfg.Path, err)
		}
		k, err := bhcrypto.ParsePrivateKey(string(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: previousPrivateKeyFile %s: %w", cfg.Path, p, err)
		}
		if info, err := os.Stat(p); err == nil {
			written = info.ModTime()
		}
		prev = bhcrypto.NewIdentity(k, cur.Cipher, cur.Prologue)
	} else if running != nil && running.Current.Public != cur.Public {
		prev, written = running.Current, now
	}
	if prev == nil || prev.Public == cur.Public {
		return ring, nil
	}
	if ring.Previous != nil && ring.Previous.Public == prev.Public {
		return ring, nil // already answering it; keep its end
	}
	until := written.Add(cfg.KeyOverlapOrDefault())
	if gw := cfg.LocalGateway(); gw != nil && gw.PreviousPublicKey != "" {
		if listed, err := bhcrypto.ParsePublicKey(gw.PreviousPublicKey); err == nil && listed == prev.Public {
			until = gw.PreviousKeyExpires
		}
	}
	return &bhcrypto.KeyRing{Current: cur, Previous: prev, PreviousUntil: until}, nil
}

// applyKeyRing makes ring the router's, logging a rotation, and keeps
// cfg's last rotation for the status. Called under g.mu once the reload's
// config is in.
func (g *gateway) applyKeyRing(cfg *config.Config, ring *bhcrypto.KeyRing) error {
	if last, err := lastRotation(cfg, g.r.KeyRing(), time.Now()); err == nil && last.Previous != nil && last.Current.Public == ring.Current.Public {
		g.rotation.Store(last)
	}
	old := g.r.KeyRing()
	if old.Current == ring.Current && old.Previous == ring.Previous && old.PreviousUntil.Equal(ring.PreviousUntil) {
		return nil
	}
	if err := g.r.SetKeyRing(ring); err != nil {
		return err
	}
	if old.Current.Public != ring.Current.Public && ring.Previous != nil {
		g.log.Info("gateway key rotated: new handshakes use the new key, the previous one is answered until its overlap ends",
			"public_key", ring.Current.Public.String(), "previous_key", ring.Previous.Public.String(), "previous_until", ring.PreviousUntil)
	}
	return nil
}

// reloadKeys applies changed key files under an unchanged config: the key
// ring and the peers' preshared keys. Nothing changes when they did not.
// Key files that cannot be read (one removed, say) leave the running
// keys and are only logged: the config is unchanged and stays in force,
// as a reload of it always did. Other refusals are returned. Called
// under g.mu.
func (g *gateway) reloadKeys(cfg *config.Config) error {
	d := keyFileDigest(cfg)
	if d == g.keyDigest {
		return nil
	}
	ring, err := keyRing(cfg, g.r.KeyRing(), time.Now())
	if errors.Is(err, fs.ErrNotExist) {
		g.log.Warn("key file missing; the running keys stay", "config", cfg.Path, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	rc, err := routerConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.Path, err)
	}
	if err := g.r.SetConfig(rc); err != nil {
		return fmt.Errorf("%s: %w", cfg.Path, err)
	}
	if err := g.applyKeyRing(cfg, ring); err != nil {
		return fmt.Errorf("%s: %w", cfg.Path, err)
	}
	g.keyDigest = d
	g.log.Info("key files reloaded", "config", cfg.Path)
	return nil
}

// rotationStatus is what the Gateway status says of the last rotation:
// the previous key, the end of its overlap (past, once over) and its
// signature; zero values when the gateway has not rotated since its key
// was pinned. Any goroutine.
func (g *gateway) rotationStatus() (prev string, until time.Time, sig string) {
	last := g.rotation.Load()
	if last == nil || last.Previous == nil || last.Current.Public != g.r.KeyRing().Current.Public {
		return "", time.Time{}, ""
	}
	return last.Previous.Public.String(), last.PreviousUntil, rolloverProof(last)
}

// rolloverProof is the previous key's signature over the current one and
// the overlap's end (crypto.SignRollover), base64, for the Gateway
// status: the catalog renderer then takes the new key without an
// approve-key. The nonce's random part is zero, which makes the
// signature deterministic (as Ed25519's is), so an unchanged ring
// publishes an unchanged status; "" when signing fails.
func rolloverProof(ring *bhcrypto.KeyRing) string {
	sig, err := bhcrypto.SignRollover(ring.Previous.Private, ring.Current.Public, ring.PreviousUntil, bytes.NewReader(make([]byte, 64)))
	if err != nil {
		return ""
	}
	return base64.StdEncoding.EncodeToString(sig[:])
}

// watchKeyFiles watches the key files cfg names (privateKeyFile,
// previousPrivateKeyFile, presharedKeys) like the config file: a change
// reloads, and the reload applies changed key files (reloadKeys). A
// preshared key kept in a Kubernetes Secret mounted as a volume thus
// follows the Secret (the kubelet swaps the volume's ..data link, which
// the watch sees). Files a later reload adds are read at each reload but
// watched from the next start.
func watchKeyFiles(ctx context.Context, cfg *config.Config, changed chan<- struct{}, log *slog.Logger) {
	paths := []string{cfg.PrivateKeyPath(), cfg.PreviousPrivateKeyPath()}
	for _, ref := range cfg.PresharedKeys {
		paths = append(paths, cfg.PresharedKeyPath(ref))
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := filewatch.Start(ctx, p, ReloadDebounce, changed, log); err != nil {
			log.Warn("key file changes will not be noticed; reload with SIGHUP", "file", p, "err", err)
		}
	}
}
