package mesh

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"time"
)

//go:embed page.html
var pageSource string

// page is parsed once; html/template escapes every name in text and
// attributes, and the page's script sets names with textContent and
// setAttribute only, so a site called "<script>" shows as text.
var page = template.Must(template.New("mesh").Parse(pageSource))

// DenseAbove is the site count above which the page drops the RTT text
// and shrinks cells to a few pixels: the heat-map of 200 sites is then
// about 1,200 pixels wide.
const DenseAbove = 30

// WritePage writes the read-only heat-map page of m: sites by sites, a
// legend, and a few lines of plain JavaScript that fetch mesh.json (a
// path relative to the page) every m.RefreshMs and redraw. The page
// loads nothing else. title names the view (a gateway, "cluster").
func WritePage(w io.Writer, m Matrix, title string) error {
	v := pageView{Title: title, Sites: m.Sites, RefreshMs: m.RefreshMs, Dense: len(m.Sites) > DenseAbove,
		Generated: m.Generated.UTC().Format(time.RFC3339Nano)}
	n := m.Counts()
	v.Summary = fmt.Sprintf("%d sites, %d pairs: %d up, %d degraded, %d down, %d connecting",
		len(m.Sites), len(m.Cells), n[Up], n[Degraded], n[Down], n[Connecting])
	for _, s := range m.Sources {
		if s.Error != "" {
			v.Errors = append(v.Errors, s.Name+": "+s.Error)
		}
	}
	idx := make(map[[2]string]int, len(m.Cells))
	for i, c := range m.Cells {
		idx[[2]string{c.From, c.To}] = i
	}
	for _, from := range m.Sites {
		row := gridRow{Site: from, Cells: make([]gridCell, 0, len(m.Sites))}
		for _, to := range m.Sites {
			gc := gridCell{From: from, To: to}
			i, ok := idx[[2]string{from, to}]
			switch {
			case from == to:
				gc.Class, gc.State = "self", "self"
			case !ok:
				gc.Class, gc.State, gc.Title = "none", "none", from+" → "+to+": no report"
			default:
				c := m.Cells[i]
				gc.Class, gc.State, gc.Title = string(c.State), string(c.State), cellTitle(c)
				if c.State == Down {
					gc.Text = "✕"
				} else if c.RTTMs > 0 {
					gc.Text = shortRTT(c.RTTMs)
				}
			}
			row.Cells = append(row.Cells, gc)
		}
		v.Grid = append(v.Grid, row)
	}
	return page.Execute(w, v)
}

type pageView struct {
	Title, Summary, Generated string
	Errors                    []string
	Sites                     []string
	Grid                      []gridRow
	RefreshMs                 int
	Dense                     bool
}

type gridRow struct {
	Site  string
	Cells []gridCell
}

type gridCell struct {
	From, To, Class, State, Title, Text string
}

// cellTitle is the tooltip of a cell; the page's script writes the same.
func cellTitle(c Cell) string {
	r := "-"
	if c.RTTMs > 0 {
		r = fmt.Sprintf("%.2f ms", c.RTTMs)
	}
	mtu := "-"
	if c.MTU > 0 {
		mtu = fmt.Sprint(c.MTU)
	}
	return fmt.Sprintf("%s → %s: %s, %s, RTT %s, loss %.1f%%, MTU %s", c.From, c.To, c.State, pathText(c.Path, c.Via), r, c.Loss*100, mtu)
}

func shortRTT(ms float64) string {
	if ms < 10 {
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.0f", ms)
}
