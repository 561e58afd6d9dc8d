package mesh

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// TableOptions shape the terminal table.
type TableOptions struct {
	// Width is the terminal's width in columns (80 when 0).
	Width int
	// Color adds ANSI colours to states and the grid.
	Color bool
	// All lists every pair even in a large mesh; without it a mesh of
	// more than MaxListed pairs lists only those that are not up.
	All bool
}

// MinWidth is the narrowest table: narrower terminals get this width.
const MinWidth = 64

// MaxListed is how many pairs the table lists before it lists only the
// pairs that are not up (TableOptions.All lists all).
const MaxListed = 60

// gridLabel is the width of the grid's label column; the grid shows
// when one column per site fits beside it.
const gridLabel = 12

// WriteTable writes m for a terminal: a grid of sites by sites (one
// character a cell) when it fits the width, then one line per site pair
// with state, path, RTT, loss, MTU and the age of the newest answer.
// Every line fits opts.Width columns: long site names are shortened in
// the middle ("westeu…prod-02"), so names that differ at the end stay
// apart. A mesh with more than MaxListed pairs lists only the pairs that
// are not up, after a count of those that are.
func WriteTable(w io.Writer, m Matrix, opts TableOptions) error {
	width := opts.Width
	if width <= 0 {
		width = 80
	}
	width = max(width, MinWidth)
	p := &printer{w: w, color: opts.Color}
	n := m.Counts()
	p.printf("%d sites, %d pairs: %s up, %s degraded, %s down, %s connecting\n",
		len(m.Sites), len(m.Cells),
		p.paint(Up, fmt.Sprint(n[Up])), p.paint(Degraded, fmt.Sprint(n[Degraded])),
		p.paint(Down, fmt.Sprint(n[Down])), p.paint(Connecting, fmt.Sprint(n[Connecting])))
	for _, s := range m.Sources {
		if s.Error != "" {
			for _, l := range wrap("! "+s.Name+": "+s.Error, width, "  ") {
				p.printf("%s\n", l)
			}
		}
	}
	if len(m.Sites) > 0 && gridLabel+1+len(m.Sites) <= width {
		writeGrid(p, m)
	}
	cells := m.Cells
	if len(cells) > MaxListed && !opts.All {
		cells = nil
		for _, c := range m.Cells {
			if c.State != Up {
				cells = append(cells, c)
			}
		}
		p.printf("%d pairs up, not listed (--all lists them); %d not up:\n", n[Up], len(cells))
	}
	if len(cells) == 0 {
		return p.err
	}
	// FROM TO STATE PATH RTT LOSS MTU AGE: the fixed columns take 45
	// with their spaces; the names share the rest.
	const fixed = 2 + 10 + 1 + 14 + 1 + 7 + 1 + 5 + 1 + 5 + 1 + 4
	nameW := min(max((width-fixed)/2, 6), 24)
	p.printf("%-*s %-*s %-10s %-14s %7s %5s %5s %4s\n", nameW, "FROM", nameW, "TO", "STATE", "PATH", "RTT", "LOSS", "MTU", "AGE")
	for _, c := range cells {
		st := fmt.Sprintf("%-10s", c.State)
		p.printf("%s %s %s %-14s %7s %5s %5s %4s\n",
			pad(shorten(c.From, nameW), nameW), pad(shorten(c.To, nameW), nameW), p.paint(c.State, st),
			shorten(pathText(c.Path, c.Via), 14), rttText(c.RTTMs), lossText(c.Loss, c.State), mtuText(c.MTU), ageText(c.AgeSeconds))
	}
	return p.err
}

// writeGrid writes the sites-by-sites grid: rows are "from", columns
// "to", numbered in the order of the legend lines below it.
func writeGrid(p *printer, m Matrix) {
	idx := map[string]int{}
	for i, s := range m.Sites {
		idx[s] = i
	}
	grid := make([][]State, len(m.Sites))
	for i := range grid {
		grid[i] = make([]State, len(m.Sites))
	}
	for _, c := range m.Cells {
		grid[idx[c.From]][idx[c.To]] = c.State
	}
	var head strings.Builder
	for i := range m.Sites {
		head.WriteByte("0123456789"[i%10])
	}
	p.printf("%*s %s\n", gridLabel, "from\\to", head.String())
	for i, s := range m.Sites {
		var b strings.Builder
		for j := range m.Sites {
			ch, st := glyph(grid[i][j], i == j)
			b.WriteString(p.paint(st, ch))
		}
		p.printf("%s %s\n", pad(shorten(fmt.Sprintf("%d %s", i%10, s), gridLabel), gridLabel), b.String())
	}
	p.printf("%*s %s %s %s %s\n", gridLabel, "",
		p.paint(Up, "● up"), p.paint(Degraded, "◐ degraded"), p.paint(Down, "✕ down"), p.paint(Connecting, "? connecting"))
}

func glyph(s State, self bool) (string, State) {
	switch {
	case self:
		return "·", ""
	case s == Up:
		return "●", Up
	case s == Degraded:
		return "◐", Degraded
	case s.Red():
		return "✕", Down
	case s == Connecting:
		return "?", Connecting
	}
	return " ", ""
}

// printer writes lines, keeping the first error.
type printer struct {
	w     io.Writer
	color bool
	err   error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// paint colours s by state when colours are on.
func (p *printer) paint(st State, s string) string {
	if !p.color {
		return s
	}
	code := ""
	switch {
	case st == Up:
		code = "32"
	case st == Degraded:
		code = "33"
	case st.Red():
		code = "1;31"
	case st == Connecting:
		code = "90"
	default:
		return s
	}
	return "\033[" + code + "m" + s + "\033[0m"
}

// shorten cuts s to at most n columns, in the middle.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	if n < 3 {
		return string(r[:n])
	}
	head := (n - 1) / 2
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// fit cuts s at the end to n columns.
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// wrap breaks s into lines of at most n columns at spaces (a word
// longer than a line is cut), later lines indented.
func wrap(s string, n int, indent string) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) <= n:
			line += " " + w
		default:
			lines = append(lines, fit(line, n))
			line = indent + w
		}
	}
	return append(lines, fit(line, n))
}

// pad pads s with spaces to n columns (fmt counts bytes, not columns).
func pad(s string, n int) string {
	if k := utf8.RuneCountInString(s); k < n {
		return s + strings.Repeat(" ", n-k)
	}
	return s
}

// PathText is a path as the table and page show it: "direct", "hub b",
// "standby gw-b2", "-" while nothing is up.
func PathText(p Path, via []string) string { return pathText(p, via) }

func pathText(p Path, via []string) string {
	switch p {
	case None:
		return "-"
	case Direct:
		return "direct"
	}
	if len(via) == 0 {
		return string(p)
	}
	return string(p) + " " + strings.Join(via, ",")
}

func rttText(msec float64) string {
	switch {
	case msec <= 0:
		return "-"
	case msec < 10:
		return fmt.Sprintf("%.2fms", msec)
	case msec < 1000:
		return fmt.Sprintf("%.0fms", msec)
	}
	return fmt.Sprintf("%.1fs", msec/1000)
}

func lossText(l float64, st State) string {
	switch {
	case l <= 0 && st == Connecting:
		return "-"
	case l <= 0:
		return "0%"
	case l < 0.1:
		return fmt.Sprintf("%.1f%%", l*100)
	}
	return fmt.Sprintf("%.0f%%", l*100)
}

func mtuText(m int) string {
	if m <= 0 {
		return "-"
	}
	return fmt.Sprint(m)
}

func ageText(sec float64) string {
	if sec < 0 {
		return "-"
	}
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 100*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
