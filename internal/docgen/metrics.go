package docgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/token"
	"path"
	"sort"
	"strings"
)

// Metric is one bridgehead_* metric the code declares.
type Metric struct {
	Name, Type, Help string
	Labels           []string
	// Package is the directory of the declaring file, from the root.
	Package string
}

// metricSkip: a tree whose metrics are not the product's (test
// harnesses and tools).
func metricSkip(dir string) bool {
	switch dir {
	case "bench", "e2e", "internal", "hack":
		return true
	}
	return false
}

// Metrics finds every metric declared in the module's non-test code: the
// Opts literals passed to prometheus.NewCounter, NewGaugeVec, ... and the
// prometheus.NewDesc calls of collectors, with names, help texts and
// labels resolved through string constants and local label slices. A
// declaration it cannot read is an error, as is a "bridgehead_..." name in
// the code that no declaration holds, so a new metric is never missed.
func Metrics(root string) ([]Metric, error) {
	dirs, err := topDirs(root)
	if err != nil {
		return nil, err
	}
	var out []Metric
	var errs []string
	for _, dir := range dirs {
		if metricSkip(dir) {
			continue
		}
		files, err := parseDir(root, dir)
		if err != nil {
			return nil, err
		}
		for _, pkg := range byPackage(files) {
			ms, es := packageMetrics(pkg)
			out = append(out, ms...)
			errs = append(errs, es...)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name && out[i].Package == out[i-1].Package {
			out = append(out[:i], out[i+1:]...)
			i--
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("metrics the scanner cannot read:\n%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

// byPackage groups files by directory.
func byPackage(files []sourceFile) [][]sourceFile {
	m := map[string][]sourceFile{}
	var dirs []string
	for _, f := range files {
		d := path.Dir(f.Rel)
		if _, ok := m[d]; !ok {
			dirs = append(dirs, d)
		}
		m[d] = append(m[d], f)
	}
	sort.Strings(dirs)
	var out [][]sourceFile
	for _, d := range dirs {
		out = append(out, m[d])
	}
	return out
}

// constructorType maps prometheus constructors to metric types.
func constructorType(name string) string {
	for _, t := range []string{"Counter", "Gauge", "Histogram", "Summary"} {
		if strings.HasPrefix(name, "New"+t) {
			return strings.ToLower(t)
		}
	}
	return ""
}

// packageMetrics reads one package's metric declarations.
func packageMetrics(files []sourceFile) ([]Metric, []string) {
	consts := stringConsts(files)
	valueTypes := constMetricTypes(files)
	var out []Metric
	var errs []string
	declared := map[token.Pos]bool{}
	for _, f := range files {
		pos := func(n ast.Node) string { return f.Fset.Position(n.Pos()).String() }
		ast.Inspect(f.File, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			fn := promFunc(call)
			switch {
			case isResultsHelper(call):
				name, ok1 := evalString(call.Args[1], consts)
				help, ok2 := evalString(call.Args[2], consts)
				if !ok1 || !ok2 {
					errs = append(errs, pos(call)+": promreg.Results with a name or help not made of literals and constants")
					return true
				}
				declared[call.Args[1].Pos()] = true
				out = append(out, Metric{Name: name, Type: "counter", Help: help, Labels: []string{"result"}, Package: path.Dir(f.Rel)})
			case fn == "NewDesc":
				if len(call.Args) < 3 {
					return true
				}
				name, ok1 := evalString(call.Args[0], consts)
				help, ok2 := evalString(call.Args[1], consts)
				labels, ok3 := labelList(call.Args[2], f.File, consts)
				if !ok1 || !ok2 || !ok3 {
					errs = append(errs, pos(call)+": NewDesc with a name, help or labels not made of literals and constants")
					return true
				}
				declared[call.Args[0].Pos()] = true
				typ := valueTypes[descKey(f.File, call)]
				if typ == "" {
					typ = "gauge"
					if strings.HasSuffix(name, "_total") {
						typ = "counter"
					}
				}
				out = append(out, Metric{Name: name, Type: typ, Help: help, Labels: labels, Package: path.Dir(f.Rel)})
			case constructorType(fn) != "":
				lit, ok := call.Args[0].(*ast.CompositeLit)
				if !ok {
					errs = append(errs, pos(call)+": prometheus."+fn+" with Opts that are not a literal")
					return true
				}
				m, nameNode, ok := optsMetric(lit, consts)
				if !ok {
					errs = append(errs, pos(call)+": Opts whose Name, Namespace, Subsystem or Help are not literals or constants")
					return true
				}
				declared[nameNode] = true
				m.Type, m.Package = constructorType(fn), path.Dir(f.Rel)
				if strings.HasSuffix(fn, "Vec") && len(call.Args) > 1 {
					labels, ok := labelList(call.Args[1], f.File, consts)
					if !ok {
						errs = append(errs, pos(call)+": labels not made of literals and constants")
					}
					m.Labels = labels
				}
				out = append(out, m)
			}
			return true
		})
	}
	// Every metric-like literal belongs to a declaration, but for the
	// Name of another library's options (a workqueue's name).
	for _, f := range files {
		ast.Inspect(f.File, func(n ast.Node) bool {
			if cl, ok := n.(*ast.CompositeLit); ok && !isPromType(cl.Type) {
				for _, e := range cl.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok && exprName(kv.Key) == "Name" {
						declared[kv.Value.Pos()] = true
					}
				}
			}
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || declared[lit.Pos()] {
				return true
			}
			s, _ := unquote(lit.Value)
			if isMetricName(s) && !knownMetric(out, s) && !inConstDecl(f.File, lit) {
				errs = append(errs, f.Fset.Position(lit.Pos()).String()+": "+s+" looks like a metric but no declaration the scanner reads has it")
			}
			return true
		})
	}
	return out, errs
}

// isMetricName: a whole bridgehead_ metric name.
func isMetricName(s string) bool {
	if !strings.HasPrefix(s, "bridgehead_") || len(s) == len("bridgehead_") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// knownMetric: s names a declared metric, or a series of one (the
// _bucket, _sum and _count of histograms).
func knownMetric(ms []Metric, s string) bool {
	for _, m := range ms {
		if s == m.Name || strings.HasPrefix(s, m.Name+"_") {
			return true
		}
	}
	return false
}

// inConstDecl: lit is a constant's value (read through the constant).
func inConstDecl(f *ast.File, lit *ast.BasicLit) bool {
	for _, d := range f.Decls {
		if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.CONST && gd.Pos() <= lit.Pos() && lit.End() <= gd.End() {
			return true
		}
	}
	return false
}

// promFunc is the name of a prometheus.X call, or "".
func promFunc(call *ast.CallExpr) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "prometheus" {
		return ""
	}
	return sel.Sel.Name
}

// optsMetric reads an Opts literal; nameNode is the Name value's position.
func optsMetric(lit *ast.CompositeLit, consts map[string]string) (Metric, token.Pos, bool) {
	var ns, sub, name, help string
	var nameNode token.Pos
	ok := true
	for _, e := range lit.Elts {
		kv, isKV := e.(*ast.KeyValueExpr)
		if !isKV {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		if key == nil {
			continue
		}
		read := func(dst *string) {
			s, good := evalString(kv.Value, consts)
			*dst, ok = s, ok && good
		}
		switch key.Name {
		case "Namespace":
			read(&ns)
		case "Subsystem":
			read(&sub)
		case "Name":
			read(&name)
			nameNode = kv.Value.Pos()
		case "Help":
			read(&help)
		}
	}
	full := name
	if sub != "" {
		full = sub + "_" + full
	}
	if ns != "" {
		full = ns + "_" + full
	}
	return Metric{Name: full, Help: help}, nameNode, ok && name != ""
}

// labelList resolves a label list: a []string literal, nil, a variable
// assigned one in the file, or append of those.
func labelList(e ast.Expr, f *ast.File, consts map[string]string) ([]string, bool) {
	switch e := e.(type) {
	case *ast.CompositeLit:
		var out []string
		for _, el := range e.Elts {
			s, ok := evalString(el, consts)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	case *ast.Ident:
		if e.Name == "nil" {
			return nil, true
		}
		if v := assignedTo(f, e.Name); v != nil {
			return labelList(v, f, consts)
		}
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok && id.Name == "append" && len(e.Args) > 0 {
			out, ok := labelList(e.Args[0], f, consts)
			if !ok {
				return nil, false
			}
			for _, a := range e.Args[1:] {
				s, ok := evalString(a, consts)
				if !ok {
					return nil, false
				}
				out = append(out, s)
			}
			return out, true
		}
	}
	return nil, false
}

// assignedTo finds the composite literal a name is given in f (`x :=
// []string{...}` or `var x = ...`).
func assignedTo(f *ast.File, name string) ast.Expr {
	var found ast.Expr
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name == name && i < len(n.Rhs) {
					if _, lit := n.Rhs[i].(*ast.CompositeLit); lit {
						found = n.Rhs[i]
					}
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if id.Name == name && i < len(n.Values) {
					found = n.Values[i]
				}
			}
		}
		return found == nil
	})
	return found
}

// descKey names where a NewDesc result is kept: the field key of the
// literal or the variable it is assigned to.
func descKey(f *ast.File, call *ast.CallExpr) string {
	key := ""
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			if n.Value == call {
				if id, ok := n.Key.(*ast.Ident); ok {
					key = id.Name
				}
			}
		case *ast.AssignStmt:
			for i, r := range n.Rhs {
				if r == call && i < len(n.Lhs) {
					key = exprName(n.Lhs[i])
				}
			}
		}
		return key == ""
	})
	return key
}

// exprName is the last name of x or a.b.x.
func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// constMetricTypes maps the names under which descriptors are kept to
// the value type their MustNewConstMetric / NewConstMetric calls give.
func constMetricTypes(files []sourceFile) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		ast.Inspect(f.File, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			switch promFunc(call) {
			case "MustNewConstMetric", "NewConstMetric":
			case "MustNewConstHistogram", "NewConstHistogram":
				out[exprName(call.Args[0])] = "histogram"
				return true
			default:
				return true
			}
			sel, ok := call.Args[1].(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "CounterValue":
				out[exprName(call.Args[0])] = "counter"
			case "GaugeValue":
				out[exprName(call.Args[0])] = "gauge"
			}
			return true
		})
	}
	return out
}

// MetricsReference renders docs/reference/metrics.md.
func MetricsReference(ms []Metric) []byte {
	var b bytes.Buffer
	b.WriteString(generatedBy("the prometheus declarations of the non-test Go code"))
	b.WriteString("# Metrics reference\n\n")
	b.WriteString("Every `bridgehead_*` metric, with the package that declares it. The gateway serves its metrics on [`metrics.listen`](config.md#metricslisten), the node agent and the controller on `--metrics-listen` ([cli.md](cli.md)).\n\n")
	b.WriteString("| Metric | Type | Labels | Package | Help |\n|---|---|---|---|---|\n")
	for _, m := range ms {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", m.Name, m.Type, cell(code(strings.Join(m.Labels, ", "))), m.Package, cell(m.Help))
	}
	return b.Bytes()
}

// isResultsHelper: a promreg.Results(reg, name, help) call, a counter
// by result.
func isResultsHelper(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Results" || len(call.Args) != 3 {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "promreg"
}

// isPromType: a composite literal's type is prometheus.X.
func isPromType(t ast.Expr) bool {
	sel, ok := t.(*ast.SelectorExpr)
	if !ok {
		return t == nil
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "prometheus"
}
