package docgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"path"
	"sort"
	"strconv"
	"strings"
)

// LogEvent is one log call at INFO or above with a literal message.
type LogEvent struct {
	Level, Message string
	Keys           []string
	// File is the source file, from the root (no line: an edit above
	// the call does not change the page).
	File string
}

// module is the module path the gateway's imports start with.
const module = "github.com/bridgehead/bridgehead/"

// GatewayPackages lists the module's packages `bridgehead run` links:
// package daemon and everything it imports inside the module, found by
// reading import lines (so files that move between packages are
// followed).
func GatewayPackages(root string) ([]string, error) {
	seen := map[string]bool{}
	queue := []string{"daemon"}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		if seen[dir] {
			continue
		}
		seen[dir] = true
		files, err := parseFlat(root, dir)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			for _, imp := range f.File.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if rest, ok := strings.CutPrefix(p, module); ok && !seen[rest] {
					queue = append(queue, rest)
				}
			}
		}
	}
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out, nil
}

// parseFlat parses the non-test files of one package directory.
func parseFlat(root, dir string) ([]sourceFile, error) {
	files, err := parseDir(root, dir)
	if err != nil {
		return nil, err
	}
	var out []sourceFile
	for _, f := range files {
		if path.Dir(f.Rel) == dir {
			out = append(out, f)
		}
	}
	return out, nil
}

// logLevels maps slog's methods to the levels they log at; Debug is left
// out.
func logLevel(method string) string {
	switch strings.TrimSuffix(method, "Context") {
	case "Info":
		return "INFO"
	case "Warn":
		return "WARN"
	case "Error":
		return "ERROR"
	}
	return ""
}

// LogEvents finds the log calls of the packages dirs at INFO or above
// whose message is a literal or a constant: x.Info("msg", "key", v, ...),
// Warn, Error, their Context forms and x.Log(ctx, slog.LevelWarn, ...).
func LogEvents(root string, dirs []string) ([]LogEvent, error) {
	var out []LogEvent
	for _, dir := range dirs {
		files, err := parseFlat(root, dir)
		if err != nil {
			return nil, err
		}
		consts := stringConsts(files)
		for _, f := range files {
			ast.Inspect(f.File, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if ev, ok := logEvent(call, consts); ok {
					ev.File = f.Rel
					out = append(out, ev)
				}
				return true
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].File < out[j].File })
	// The same event logged from two places in one file is one row.
	seen := map[string]bool{}
	uniq := out[:0]
	for _, e := range out {
		k := e.File + "\x00" + e.Level + "\x00" + e.Message + "\x00" + strings.Join(e.Keys, ",")
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, e)
		}
	}
	return uniq, nil
}

// CommandLogEvents finds the log events of the function fn (the run
// command's setup, setupRun) in the package directory dir.
func CommandLogEvents(root, dir, fn string) ([]LogEvent, error) {
	files, err := parseFlat(root, dir)
	if err != nil {
		return nil, err
	}
	consts := stringConsts(files)
	var out []LogEvent
	found := false
	for _, f := range files {
		for _, decl := range f.File.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Name.Name != fn || fd.Body == nil {
				continue
			}
			found = true
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if ev, ok := logEvent(call, consts); ok {
						ev.File = f.Rel
						out = append(out, ev)
					}
				}
				return true
			})
		}
	}
	if !found {
		return nil, fmt.Errorf("no function %s in %s", fn, dir)
	}
	return out, nil
}

// logEvent reads one call as a log event.
func logEvent(call *ast.CallExpr, consts map[string]string) (LogEvent, bool) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return LogEvent{}, false
	}
	args := call.Args
	level := logLevel(sel.Sel.Name)
	if strings.HasSuffix(sel.Sel.Name, "Context") && len(args) > 0 {
		args = args[1:]
	}
	if sel.Sel.Name == "Log" && len(args) >= 3 {
		level = slogLevel(args[1])
		args = args[2:]
	}
	if level == "" || len(args) == 0 {
		return LogEvent{}, false
	}
	msg, ok := evalString(args[0], consts)
	if !ok || msg == "" {
		return LogEvent{}, false
	}
	var keys []string
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		switch a := rest[i].(type) {
		case *ast.CallExpr: // slog.String("key", v), slog.Group(...)
			if k := attrKey(a, consts); k != "" {
				keys = append(keys, k)
				continue
			}
		}
		if k, ok := evalString(rest[i], consts); ok {
			keys = append(keys, k)
			i++ // its value
		}
	}
	return LogEvent{Level: level, Message: msg, Keys: keys}, true
}

// attrKey is the key of a slog.X("key", v) attribute, or "".
func attrKey(call *ast.CallExpr, consts map[string]string) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || len(call.Args) == 0 {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "slog" {
		return ""
	}
	k, _ := evalString(call.Args[0], consts)
	return k
}

// slogLevel reads slog.LevelX; "" for Debug or what it cannot read.
func slogLevel(e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	switch sel.Sel.Name {
	case "LevelInfo":
		return "INFO"
	case "LevelWarn":
		return "WARN"
	case "LevelError":
		return "ERROR"
	}
	return ""
}

// LogsReference renders docs/reference/logs.md.
func LogsReference(events []LogEvent, pkgs []string) []byte {
	var b bytes.Buffer
	b.WriteString(generatedBy("the slog calls of the run command and of the packages it links"))
	b.WriteString("# Gateway log events\n\n")
	b.WriteString("Every event the gateway (`bridgehead run`) logs at INFO, WARN or ERROR with a fixed message, with its keys and where it is logged. ")
	b.WriteString("`--log-format json` writes them as JSON objects with `level` and `msg`; `--log-level` filters them ([cli.md](cli.md#run)). Events logged at DEBUG, and messages built at run time, are left out.\n\n")
	fmt.Fprintf(&b, "Packages: %s.\n\n", strings.Join(pkgs, ", "))
	b.WriteString("| Level | Message | Keys | Source |\n|---|---|---|---|\n")
	for _, e := range events {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", e.Level, cell(code(e.Message)), cell(code(strings.Join(e.Keys, ", "))), e.File)
	}
	return b.Bytes()
}
