package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// command is one entry of the CLI's command table. The usage text, `help
// COMMAND`, `COMMAND --help` and the test that holds the README's command
// list to this table all read it, so a command exists in one place.
type command struct {
	name     string
	synopsis string // arguments after the name in the usage text
	summary  string // one line
	// aliases also select the command ("--version").
	aliases []string
	// setup declares the command's flags on fs and returns the action
	// that runs once they are parsed.
	setup func(fs *flag.FlagSet) action
}

// action runs a command with its positional arguments.
type action func(std *stdio, args []string) error

// stdio are the streams of one CLI invocation.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// commands is the CLI's command table, in the order usage lists them.
func commands() []command {
	return []command{
		{name: "run", synopsis: "--config FILE",
			summary: "run the gateway in the foreground (needs root or CAP_NET_ADMIN; SIGTERM/SIGINT stop it)",
			setup:   setupRun},
		{name: "check", synopsis: "--config FILE",
			summary: "validate a config, or a file of Site/Gateway resources: every problem with file, line and field",
			setup:   setupCheck},
		{name: "catalog", synopsis: "to-resources --config FILE [--nodes] [--gateway-rbac] | from-resources --file FILE [--config FILE]",
			summary: "turn a config's catalog into Site and Gateway resources (YAML for kubectl), or resources back into a catalog",
			setup:   setupCatalog},
		{name: "gateway", synopsis: "admit SITE/NAME [--in-cluster] [--address IP] [--endpoint HOST:PORT] [--pin KEY | --approve-key KEY] [--token-ttl 24h] [-o FILE]",
			summary: "admit a gateway: its Gateway object, its own credential, a kubeconfig with a short-lived token; pin or approve its key",
			setup:   setupGateway},
		{name: "routes", synopsis: "--config FILE --site NAME --format FORMAT",
			summary: "print the static routes the nodes of a site need",
			setup:   setupRoutes},
		{name: "node", synopsis: "--config FILE --node NAME [--uninstall]",
			summary: "run the node agent: CNI config, routes to the other nodes and sites, egress SNAT (needs CAP_NET_ADMIN)",
			setup:   setupNode},
		{name: "status", synopsis: "[--json] [--socket PATH] [--timeout DURATION] | --mesh [--endpoint ADDR]... [--kubernetes] [-o table|json] [--color] [--all]",
			summary: "show the running gateway's sites, gateways, sessions and drops, or with --mesh the mesh of sites (every gateway's view); exit 1 when a remote site is unreachable",
			setup:   setupStatus},
		{name: "verify", synopsis: "--config FILE [--on gateway|node|pod] [--json] [--timeout DURATION] [--target ADDR]",
			summary: "check the running gateway end to end (remote gateways, nodes' kubelet port, path MTU, routes, forwarding, relay), or with --on node|pod pods in every site, a Service, DNS, egress and the callback path; exit 1 on a FAIL",
			setup:   setupVerify},
		{name: "controller", synopsis: "[--kubeconfig FILE] [--namespace NAMESPACE] [--metrics-listen ADDR]",
			summary: "assign Nodes to Sites and allocate their pod blocks (in-cluster Deployment, leader-elected)",
			setup:   setupController},
		{name: "genkey", synopsis: "[-o FILE [--force]]",
			summary: "write a new base64 private key to FILE (mode 0600) or print it",
			setup:   setupGenkey},
		{name: "rotate-key", synopsis: "--config FILE [--overlap 24h] [--write-config]",
			summary: "give the gateway a new key; the old one keeps working for the overlap (previousPrivateKeyFile); print or write the catalog lines",
			setup:   setupRotateKey},
		{name: "pubkey", synopsis: "< PRIVATE-KEY-FILE",
			summary: "read a private key on stdin, print its public key",
			setup:   setupPubkey},
		{name: "version", aliases: []string{"--version", "-version"},
			summary: "print the version",
			setup:   setupVersion},
		{name: "help", synopsis: "[COMMAND]", aliases: []string{"-h", "-help", "--help"},
			summary: "list the commands, or show a command's flags",
			setup:   setupHelp},
	}
}

// lookup finds a command by name or alias.
func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
		for _, a := range c.aliases {
			if a == name {
				return c, true
			}
		}
	}
	return command{}, false
}

// commandNames lists the names of the command table.
func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

// flagSet builds a command's flag set. Parse errors are returned, never
// printed by the flag package: run prints each once.
func (c command) flagSet() (*flag.FlagSet, action) {
	fs := flag.NewFlagSet("bridgehead "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	act := c.setup(fs)
	return fs, act
}

// writeUsage writes the list of commands.
func writeUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: bridgehead COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "'bridgehead help COMMAND' or 'bridgehead COMMAND --help' shows a command's flags.")
}

// writeHelp writes a command's synopsis, summary and flags.
func writeHelp(w io.Writer, c command) {
	fs, _ := c.flagSet()
	fmt.Fprintf(w, "usage: bridgehead %s", c.name)
	if c.synopsis != "" {
		fmt.Fprintf(w, " %s", c.synopsis)
	}
	fmt.Fprintf(w, "\n\n%s\n", c.summary)
	var lines [][2]string
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if len(f.Name) == 1 {
			left = "-" + f.Name
		}
		if name != "" {
			left += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			usage += " (default " + f.DefValue + ")"
		}
		lines = append(lines, [2]string{left, usage})
	})
	if len(lines) == 0 {
		return
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l[0]))
	}
	fmt.Fprintf(w, "\nflags:\n")
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s  %s\n", width, l[0], l[1])
	}
}

// flagNames lists a command's flags, as the README spells them.
func (c command) flagNames() []string {
	fs, _ := c.flagSet()
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) == 1 {
			names = append(names, "-"+f.Name)
		} else {
			names = append(names, "--"+f.Name)
		}
	})
	sort.Strings(names)
	return names
}

// suggest returns " (did you mean X?)" for a mistyped command name.
func suggest(name string) string {
	if name == "" {
		return ""
	}
	for _, c := range commands() {
		if strings.HasPrefix(c.name, name) || strings.HasPrefix(name, c.name) || editDistance(name, c.name) <= 2 {
			return fmt.Sprintf("; did you mean %q?", c.name)
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func setupVersion(fs *flag.FlagSet) action {
	return func(std *stdio, args []string) error {
		if len(args) > 0 {
			return usageError{errUnexpectedArgs(args)}
		}
		_, err := fmt.Fprintln(std.out, "bridgehead", buildVersion())
		return err
	}
}

func setupHelp(fs *flag.FlagSet) action {
	return func(std *stdio, args []string) error {
		switch len(args) {
		case 0:
			writeUsage(std.out)
			return nil
		case 1:
			c, ok := lookup(args[0])
			if !ok {
				return usageError{fmt.Errorf("unknown command %q%s (commands: %s)", args[0], suggest(args[0]), strings.Join(commandNames(), ", "))}
			}
			writeHelp(std.out, c)
			return nil
		}
		return usageError{errUnexpectedArgs(args[1:])}
	}
}
