// Package mdblock reads the fenced code blocks of a Markdown file, with the
// marker comment that precedes each, for the tests that keep the README's
// examples and commands working.
//
// A marker is an HTML comment on the last non-blank line before the
// opening fence:
//
//	<!-- runs-in: TestName -->      the block is run by that test
//	<!-- not-run: reason -->        the block is not run, for that reason
//	<!-- fragment: reason -->       a config block that is not a whole file
//	<!-- not-config: reason -->     a YAML block that is no bridgehead config
//	                                (cloud-init, a Kubernetes manifest)
//
// Functions here keep no state; they are safe for concurrent use.
package mdblock

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	File string
	Line int    // line of the opening fence, 1-based
	Lang string // info string after the fence ("sh", "yaml")
	Text string // the lines between the fences, each ending in "\n"
	// Marker is the kind of the preceding marker comment ("runs-in",
	// "not-run", "fragment", "not-config") and Arg what follows its colon; both are
	// empty without a marker.
	Marker, Arg string
}

func (b Block) String() string { return fmt.Sprintf("%s:%d (```%s)", b.File, b.Line, b.Lang) }

// Read returns the fenced blocks of a Markdown file, in order.
func Read(path string) ([]Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse returns the fenced blocks of Markdown text; name is used in
// Block.File and errors. An unclosed fence is an error.
func Parse(name string, data []byte) ([]Block, error) {
	var (
		out     []Block
		cur     *Block
		body    strings.Builder
		fence   string
		lastTxt string // last non-blank line outside blocks
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if trimmed == fence {
				cur.Text = body.String()
				out = append(out, *cur)
				cur = nil
				lastTxt = ""
				continue
			}
			body.WriteString(line)
			body.WriteString("\n")
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			b := Block{File: name, Line: n, Lang: strings.TrimSpace(trimmed[3:])}
			b.Marker, b.Arg = marker(lastTxt)
			cur = &b
			body.Reset()
			continue
		}
		if trimmed != "" {
			lastTxt = trimmed
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: code block is never closed", name, cur.Line)
	}
	return out, nil
}

// marker splits "<!-- kind: arg -->" into kind and arg.
func marker(line string) (kind, arg string) {
	inner, ok := strings.CutPrefix(line, "<!--")
	if !ok {
		return "", ""
	}
	inner, ok = strings.CutSuffix(inner, "-->")
	if !ok {
		return "", ""
	}
	kind, arg, ok = strings.Cut(strings.TrimSpace(inner), ":")
	if !ok {
		return "", ""
	}
	return strings.TrimSpace(kind), strings.TrimSpace(arg)
}
