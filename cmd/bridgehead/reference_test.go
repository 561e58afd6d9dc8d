package main

import (
	"bytes"
	"flag"
	"testing"

	"github.com/bridgehead/bridgehead/internal/docgen"
	"github.com/bridgehead/bridgehead/internal/golden"
)

var updateReference = flag.Bool("update", false, "rewrite docs/reference/cli.md")

// cliReferencePath is the generated CLI reference, from this package's
// directory.
const cliReferencePath = "../../docs/reference/cli.md"

// TestReferenceCLI holds docs/reference/cli.md to the command table:
// every command, its synopsis, summary and every flag with its default.
// `go test ./cmd/bridgehead -run TestReference -update` rewrites it.
func TestReferenceCLI(t *testing.T) {
	golden.Check(t, cliReferencePath, cliReference(commands()), *updateReference)
}

// TestReferenceCLIDetectsDrift: a flag added to a command changes the
// page, so the golden check above cannot pass with a stale page.
func TestReferenceCLIDetectsDrift(t *testing.T) {
	cmds := commands()
	before := cliReference(cmds)
	setup := cmds[0].setup
	cmds[0].setup = func(fs *flag.FlagSet) action {
		fs.String("new-flag", "x", "a flag the page does not list")
		return setup(fs)
	}
	after := cliReference(cmds)
	if bytes.Equal(before, after) {
		t.Fatal("adding a flag did not change the CLI reference")
	}
	if !bytes.Contains(after, []byte("| `--new-flag string` | `x` |")) {
		t.Errorf("the new flag is missing from the reference:\n%s", after)
	}
}

// cliReference renders the CLI reference of cmds in Markdown.
func cliReference(cmds []command) []byte {
	var table []docgen.CLICommand
	for _, c := range cmds {
		dc := docgen.CLICommand{Name: c.name, Synopsis: c.synopsis, Summary: c.summary, Aliases: c.aliases}
		fs, _ := c.flagSet()
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			dash := "--"
			if len(f.Name) == 1 {
				dash = "-"
			}
			dc.Flags = append(dc.Flags, docgen.CLIFlag{Name: dash + f.Name, Arg: arg, Default: f.DefValue, Usage: usage})
		})
		table = append(table, dc)
	}
	return docgen.CLIReference(table)
}
