package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Record is one run of verify as published for the cluster's matrix
// (verify --report): where it ran, when, and every check. package
// verify/kubereport stores one per site and node in the API server.
type Record struct {
	Site string `json:"site"`
	Node string `json:"node"`
	// On is where it ran: node or pod.
	On     string    `json:"on"`
	Time   time.Time `json:"time"`
	Checks []Check   `json:"checks"`
}

// NewRecord is rep as run on node of site at t.
func NewRecord(site, node, on string, t time.Time, rep *Report) Record {
	return Record{Site: site, Node: node, On: on, Time: t.UTC().Truncate(time.Second), Checks: slices.Clone(rep.Checks)}
}

// ParseRecord reads a published Record, refusing one that lacks its site,
// node or time or has a check without a name or with an unknown result.
func ParseRecord(data []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("report: %w", err)
	}
	switch {
	case r.Site == "":
		return Record{}, errors.New("report: site: is required")
	case r.Node == "":
		return Record{}, errors.New("report: node: is required")
	case r.Time.IsZero():
		return Record{}, errors.New("report: time: is required")
	}
	for i, c := range r.Checks {
		if c.Name == "" {
			return Record{}, fmt.Errorf("report: checks[%d].check: is required", i)
		}
		if c.Result != Pass && c.Result != Fail && c.Result != Skip {
			return Record{}, fmt.Errorf("report: checks[%d].result: %q is not PASS, FAIL or SKIP", i, c.Result)
		}
	}
	return r, nil
}

// MatrixOptions are what a Matrix is built against.
type MatrixOptions struct {
	// Sites are every site of the cluster; a site without a report gets
	// a row saying so.
	Sites []string
	// MaxAge: a report older than this is stale (0: never).
	MaxAge time.Duration
	// Now is the time ages are measured at.
	Now time.Time
}

// Matrix is the cluster's site × check table: a row per published report
// (site and node), a row per site without one, a column per check.
type Matrix struct {
	Checks []string `json:"checks"`
	Rows   []Row    `json:"rows"`
	// Failing, Stale and Missing count rows with a FAIL, stale reports
	// and sites without a report.
	Failing int `json:"failing"`
	Stale   int `json:"stale"`
	Missing int `json:"missing"`
}

// Row is one report, or one site without a report (NoReport).
type Row struct {
	Site     string     `json:"site"`
	Node     string     `json:"node,omitempty"`
	On       string     `json:"on,omitempty"`
	Time     *time.Time `json:"time,omitempty"`
	Age      string     `json:"age,omitempty"`
	Stale    bool       `json:"stale,omitempty"`
	NoReport bool       `json:"noReport,omitempty"`
	// Cells are by check name: FAIL when any target of the check failed,
	// else PASS when any passed, else SKIP.
	Cells map[string]Cell `json:"cells,omitempty"`
}

// Cell is one check of one report, over all its targets.
type Cell struct {
	Result Result `json:"result"`
	// Targets is how many targets the check had.
	Targets int `json:"targets"`
	// Reason is the first failing target and why, or for a SKIP why.
	Reason string `json:"reason,omitempty"`
}

// OK reports whether every site has a fresh report and none failed.
func (m *Matrix) OK() bool { return m.Failing == 0 && m.Stale == 0 && m.Missing == 0 }

// BuildMatrix builds the matrix of recs: rows sorted by site and node,
// check columns in the order the reports list them.
func BuildMatrix(recs []Record, o MatrixOptions) *Matrix {
	m := &Matrix{}
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(a, b Record) int {
		if c := strings.Compare(a.Site, b.Site); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.Site] = true
		t := r.Time
		row := Row{Site: r.Site, Node: r.Node, On: r.On, Time: &t, Cells: map[string]Cell{}}
		age := o.Now.Sub(r.Time)
		row.Age = age.Round(time.Second).String()
		if o.MaxAge > 0 && age > o.MaxAge {
			row.Stale = true
			m.Stale++
		}
		for _, c := range r.Checks {
			if !slices.Contains(m.Checks, c.Name) {
				m.Checks = append(m.Checks, c.Name)
			}
			row.Cells[c.Name] = addToCell(row.Cells[c.Name], c)
		}
		for _, c := range row.Cells {
			if c.Result == Fail {
				m.Failing++
				break
			}
		}
		m.Rows = append(m.Rows, row)
	}
	for _, s := range o.Sites {
		if !seen[s] {
			m.Rows = append(m.Rows, Row{Site: s, NoReport: true})
			m.Missing++
		}
	}
	slices.SortStableFunc(m.Rows, func(a, b Row) int { return strings.Compare(a.Site, b.Site) })
	return m
}

func addToCell(cell Cell, c Check) Cell {
	cell.Targets++
	reason := joinNonEmpty(": ", c.Target, c.Detail)
	switch {
	case c.Result == Fail && cell.Result != Fail:
		cell.Result, cell.Reason = Fail, reason
	case c.Result == Pass && cell.Result != Fail:
		cell.Result, cell.Reason = Pass, ""
	case c.Result == Skip && cell.Result == "":
		cell.Result, cell.Reason = Skip, reason
	}
	return cell
}

// WriteTable prints the matrix: a row per report (AGE marked "stale"
// beyond the maximum age), "no report" for a site without one, a "->"
// line per FAIL and SKIP with its reason, and a summary.
func (m *Matrix) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SITE\tNODE\tON\tAGE")
	for _, c := range m.Checks {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(c))
	}
	fmt.Fprintln(tw)
	for _, r := range m.Rows {
		if r.NoReport {
			fmt.Fprintf(tw, "%s\t-\t-\tno report", r.Site)
			for range m.Checks {
				fmt.Fprint(tw, "\t-")
			}
			fmt.Fprintln(tw)
			continue
		}
		age := r.Age
		if r.Stale {
			age += " (stale)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s", r.Site, r.Node, orDash(r.On), age)
		for _, c := range m.Checks {
			cell, ok := r.Cells[c]
			if !ok {
				fmt.Fprint(tw, "\t-")
				continue
			}
			fmt.Fprintf(tw, "\t%s", cell.Result)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	var notes []string
	for _, r := range m.Rows {
		for _, c := range m.Checks {
			if cell, ok := r.Cells[c]; ok && cell.Result != Pass && cell.Reason != "" {
				notes = append(notes, fmt.Sprintf("  %s/%s %s %s: %s", r.Site, r.Node, c, cell.Result, cell.Reason))
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	fmt.Fprintf(w, "\n%d reports: %d failing, %d stale; sites without a report: %d\n", len(m.Rows)-m.Missing, m.Failing, m.Stale, m.Missing)
}

// WriteJSON prints the matrix as JSON.
func (m *Matrix) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(m)
}
