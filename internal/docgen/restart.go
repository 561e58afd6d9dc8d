package docgen

import (
	"fmt"
	"go/ast"
	"go/token"
)

// RestartOnly lists the config fields a reload refuses to change, as the
// gateway decides them: the first argument of each `same("field", old,
// new)` call in the function restartOnly, found anywhere under
// root/daemon.
func RestartOnly(root string) ([]string, error) {
	files, err := parseDir(root, "daemon")
	if err != nil {
		return nil, err
	}
	var fields []string
	found := false
	for _, f := range files {
		for _, decl := range f.File.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Name.Name != "restartOnly" || fd.Body == nil {
				continue
			}
			found = true
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) < 3 {
					return true
				}
				if _, local := call.Fun.(*ast.Ident); !local {
					return true
				}
				if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, ok := unquote(lit.Value); ok {
						fields = append(fields, s)
					}
				}
				return true
			})
		}
	}
	if !found || len(fields) == 0 {
		return nil, fmt.Errorf("no restartOnly function comparing fields under %s/daemon", root)
	}
	return fields, nil
}
