package config

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem found in a configuration file. Field is the path of
// the offending value in YAML terms, e.g. "sites[0].nodeCIDRs[1]".
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

// Error formats the problem as "FILE:LINE: FIELD: MSG". The line is left
// out when unknown (0) and the field when empty (syntax errors).
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	file := e.File
	if file == "" {
		file = "<config>"
	}
	b.WriteString(file)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in a file. Its Error method prints one
// problem per line, ordered by line number.
type ErrorList []*Error

// Error implements error.
func (l ErrorList) Error() string {
	s := l.sorted()
	lines := make([]string, 0, len(s))
	for _, e := range s {
		if e != nil {
			lines = append(lines, e.Error())
		}
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find the individual *Error values.
func (l ErrorList) Unwrap() []error {
	out := make([]error, 0, len(l))
	for _, e := range l {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}

// Err returns l as an error, or nil when l is empty. Use it instead of
// returning an empty ErrorList through an error interface.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// sorted returns a copy ordered by line; problems on the same line keep
// the order they were found in.
func (l ErrorList) sorted() ErrorList {
	s := make(ErrorList, 0, len(l))
	for _, e := range l {
		if e != nil {
			s = append(s, e)
		}
	}
	sort.SliceStable(s, func(i, j int) bool { return s[i].Line < s[j].Line })
	return s
}

// reporter collects problems (and, for Check, warnings) against a file,
// looking up the line of a field path in the line table built by Parse.
type reporter struct {
	file string
	// catalog, when set, is the followed catalog file the sites were
	// read from: problems with a field under sites name it instead.
	catalog string
	// catalogRelay: the relay section came from the catalog file too.
	catalogRelay bool
	lines        map[string]int
	errs         ErrorList
	warns        ErrorList
	// ops counts the primitive steps of Check's rules (see prefixset.go).
	ops int
}

func (r *reporter) errorAt(line int, field, format string, args ...any) {
	r.errs = append(r.errs, &Error{File: r.fileOf(field), Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// fileOf is the file a field was read from.
func (r *reporter) fileOf(field string) string {
	if r.catalog != "" && catalogField(field, r.catalogRelay) {
		return r.catalog
	}
	return r.file
}

// errorf reports a problem with the value at path.
func (r *reporter) errorf(path, format string, args ...any) {
	r.errorAt(r.line(path), path, format, args...)
}

// warnf reports a warning with the value at path.
func (r *reporter) warnf(path, format string, args ...any) {
	r.warns = append(r.warns, &Error{File: r.fileOf(path), Line: r.line(path), Field: path, Msg: fmt.Sprintf(format, args...)})
}

// line returns the line of path or, when path itself was not in the file
// (a missing field), the line of its closest enclosing value.
func (r *reporter) line(path string) int {
	return lineOf(r.lines, path)
}

func lineOf(lines map[string]int, path string) int {
	for {
		if l, ok := lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// parentPath strips the last ".name" or "[i]" from a field path.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// joinPath appends a field name to a path.
func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func indexPath(path string, i int) string {
	return fmt.Sprintf("%s[%d]", path, i)
}
