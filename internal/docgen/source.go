package docgen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// sourceFile is one parsed non-test Go file of the module.
type sourceFile struct {
	// Rel is the path from the module root, with slashes.
	Rel  string
	File *ast.File
	Fset *token.FileSet
}

// parseDir parses the non-test Go files under root/dir, the whole tree
// (files that move into subpackages are still found), with comments.
// Directories named testdata and hidden ones are skipped.
func parseDir(root, dir string) ([]sourceFile, error) {
	var out []sourceFile
	fset := token.NewFileSet()
	base := filepath.Join(root, dir)
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != base && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, sourceFile{Rel: filepath.ToSlash(rel), File: f, Fset: fset})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Rel < out[j].Rel })
	return out, err
}

// stringConsts maps the names of a package's string constants to their
// values (constants defined as literals or sums of literals).
func stringConsts(files []sourceFile) map[string]string {
	consts := map[string]string{}
	for range 3 { // constants built from constants
		for _, f := range files {
			for _, decl := range f.File.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if s, ok := evalString(vs.Values[i], consts); ok {
								consts[name.Name] = s
							}
						}
					}
				}
			}
		}
	}
	return consts
}

// evalString evaluates a string literal, a constant named in consts, or
// a sum of those.
func evalString(e ast.Expr, consts map[string]string) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		return unquote(e.Value)
	case *ast.Ident:
		s, ok := consts[e.Name]
		return s, ok
	case *ast.ParenExpr:
		return evalString(e.X, consts)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok1 := evalString(e.X, consts)
		b, ok2 := evalString(e.Y, consts)
		return a + b, ok1 && ok2
	}
	return "", false
}

// unquote reads a Go string literal, interpreted or raw.
func unquote(lit string) (string, bool) {
	s, err := strconv.Unquote(lit)
	return s, err == nil
}
