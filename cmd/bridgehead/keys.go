package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"strings"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

func cmdGenkey(stdout io.Writer) error {
	k, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, k.String())
	return err
}

func cmdPubkey(stdin io.Reader, stdout io.Writer) error {
	raw, err := io.ReadAll(io.LimitReader(stdin, 4096))
	if err != nil {
		return err
	}
	k, err := bhcrypto.ParsePrivateKey(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("reading private key from stdin: %w", err)
	}
	_, err = fmt.Fprintln(stdout, k.PublicKey().String())
	return err
}

func errUnexpectedArgs(args []string) error {
	return fmt.Errorf("unexpected arguments: %s", strings.Join(args, " "))
}
