package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

func setupGenkey(fs *flag.FlagSet) action {
	out := fs.String("o", "", "write the key to `FILE` with mode 0600, creating its directory (mode 0700) if missing")
	force := fs.Bool("force", false, "with -o: replace an existing key file (the old key is lost)")
	keep := fs.Bool("keep", false, "with -o: keep an existing key file and succeed (a gateway's first start generates its key once; an init container runs this at every start)")
	return noArgs(func(std *stdio) error {
		switch {
		case (*force || *keep) && *out == "":
			return usageError{errors.New("--force and --keep only apply with -o FILE")}
		case *force && *keep:
			return usageError{errors.New("--force and --keep contradict each other")}
		}
		if *keep {
			if _, err := os.Stat(*out); err == nil {
				fmt.Fprintf(std.err, "%s exists; keeping it\n", *out)
				return nil
			}
		}
		k, err := bhcrypto.GeneratePrivateKey(rand.Reader)
		if err != nil {
			return err
		}
		if *out == "" {
			_, err = fmt.Fprintln(std.out, k.String())
			return err
		}
		return writeKeyFile(*out, k.String()+"\n", *force)
	})
}

// writeKeyFile writes a private key readable only by its owner. A missing
// directory is created with mode 0700. Without force an existing file is
// left alone and reported; with force it is replaced atomically, so a
// reader never sees a half-written key.
func writeKeyFile(path, key string, force bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, iofs.ErrExist) {
			return fmt.Errorf("%s already exists; not overwriting a private key (--force replaces it, and the old key is lost)", path)
		}
		if err != nil {
			return err
		}
		return finishKeyFile(f, key, func() { os.Remove(path) })
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*") // mode 0600
	if err != nil {
		return err
	}
	if err := finishKeyFile(f, key, func() { os.Remove(f.Name()) }); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// finishKeyFile makes f mode 0600 whatever the umask did, writes the key,
// syncs and closes it; on failure it calls undo.
func finishKeyFile(f *os.File, key string, undo func()) error {
	err := f.Chmod(0o600)
	if err == nil {
		_, err = f.WriteString(key)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		undo()
	}
	return err
}

func setupPubkey(fs *flag.FlagSet) action {
	return noArgs(func(std *stdio) error {
		raw, err := io.ReadAll(io.LimitReader(std.in, 4096))
		if err != nil {
			return err
		}
		k, err := bhcrypto.ParsePrivateKey(strings.TrimSpace(string(raw)))
		if err != nil {
			return fmt.Errorf("reading a private key from stdin: %w", err)
		}
		_, err = fmt.Fprintln(std.out, k.PublicKey().String())
		return err
	})
}
