package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// pluginName is the name kubectl's plugin convention looks for on PATH
// for `kubectl bridgehead`: the packages install it as a symlink to
// bridgehead, which dispatches on the name it was run as.
const pluginName = "kubectl-bridgehead"

// dispatch runs one invocation: as the kubectl plugin when argv[0] is
// pluginName, else as bridgehead.
func dispatch(argv []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(argv) == 0 || strings.TrimSuffix(filepath.Base(argv[0]), ".exe") != pluginName {
		return run(argv[min(1, len(argv)):], stdin, stdout, stderr)
	}
	return runPlugin(argv[1:], stdin, stdout, stderr)
}

// runPlugin is `kubectl bridgehead SUBCOMMAND`: mesh is `bridgehead
// status --mesh --kubernetes` (every Gateway's published rows, through
// the kubeconfig kubectl would use).
func runPlugin(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, pluginUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "mesh":
		return run(append([]string{"status", "--mesh", "--kubernetes"}, args[1:]...), stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "kubectl bridgehead: unknown command %q\n%s", args[0], pluginUsage)
	return 2
}

const pluginUsage = `kubectl bridgehead: bridgehead's kubectl plugin

  kubectl bridgehead mesh [-o table|json] [--color] [--all] [--kubeconfig FILE]
      the mesh of sites from every Gateway's published rows: which site
      reaches which, path (direct, hub, standby), RTT, loss, MTU, age;
      exit 1 when a pair is down (bridgehead status --mesh --kubernetes)
`
