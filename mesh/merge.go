package mesh

import (
	"cmp"
	"slices"
	"time"
)

// DefaultRefresh is how often a live view fetches the matrix unless the
// builder says otherwise.
const DefaultRefresh = time.Second

// Merge builds the matrix from rows of any number of gateways, at now.
// Rows of the same gateway toward the same site keep the first given (a
// gateway's own live rows go first, so they win over its published ones).
// A site pair's cell is up when every row is, down when every row is
// red, connecting when nothing answered yet, and degraded otherwise: some
// of the site's gateways reach the remote site and some do not.
func Merge(rows []Row, sources []Source, now time.Time, refresh time.Duration) Matrix {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	type gwKey struct{ site, gw, to string }
	seen := map[gwKey]bool{}
	byPair := map[[2]string][]Row{}
	sites := map[string]bool{}
	for _, r := range rows {
		k := gwKey{r.FromSite, r.FromGateway, r.To}
		if seen[k] || r.FromSite == r.To {
			continue
		}
		seen[k] = true
		p := [2]string{r.FromSite, r.To}
		byPair[p] = append(byPair[p], r)
		sites[r.FromSite], sites[r.To] = true, true
	}
	// Empty, not null, in JSON: the page's script ranges over both.
	m := Matrix{Generated: now, Sources: sources, RefreshMs: int(refresh / time.Millisecond), Sites: []string{}, Cells: []Cell{}}
	for s := range sites {
		m.Sites = append(m.Sites, s)
	}
	slices.Sort(m.Sites)
	for p, rs := range byPair {
		slices.SortFunc(rs, func(a, b Row) int { return cmp.Compare(a.FromGateway, b.FromGateway) })
		m.Cells = append(m.Cells, mergeCell(p[0], p[1], rs, now))
	}
	slices.SortFunc(m.Cells, func(a, b Cell) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	return m
}

// mergeCell folds the rows of one site pair.
func mergeCell(from, to string, rs []Row, now time.Time) Cell {
	c := Cell{From: from, To: to, Rows: rs, AgeSeconds: -1}
	var up, red, conn int
	var rtts []float64
	var measured time.Time
	viaSet := map[string]bool{}
	for _, r := range rs {
		switch {
		case r.State == Up:
			up++
		case r.State.Red():
			red++
		case r.State == Connecting:
			conn++
		}
		if r.RTTMs > 0 {
			rtts = append(rtts, r.RTTMs)
		}
		c.Loss = max(c.Loss, r.Loss)
		if r.MTU > 0 && (c.MTU == 0 || r.MTU < c.MTU) {
			c.MTU = r.MTU
		}
		if r.Since.After(c.Since) {
			c.Since = r.Since
		}
		if r.Measured.After(measured) {
			measured = r.Measured
		}
		if r.Path.rank() > c.Path.rank() {
			c.Path = r.Path
		}
	}
	for _, r := range rs {
		if r.Path == c.Path {
			for _, v := range r.Via {
				viaSet[v] = true
			}
		}
	}
	for v := range viaSet {
		c.Via = append(c.Via, v)
	}
	slices.Sort(c.Via)
	n := len(rs)
	switch {
	case up == n:
		c.State = Up
	case red == n:
		c.State = Down
	case conn == n:
		c.State = Connecting
	case red+conn == n:
		c.State = Down
	default:
		c.State = Degraded
	}
	if c.State == Down || c.State == Connecting {
		c.Path, c.Via = None, nil
	}
	c.RTTMs = median(rtts)
	if !measured.IsZero() {
		c.AgeSeconds = max(0, now.Sub(measured).Seconds())
	}
	return c
}

// rank orders paths: a cell shows the most remarkable of its rows'.
func (p Path) rank() int {
	switch p {
	case Direct:
		return 1
	case Standby:
		return 2
	case Hub:
		return 3
	}
	return 0
}

// median of xs (0 for none); xs is reordered.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}
