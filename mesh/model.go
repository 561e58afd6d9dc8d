package mesh

import (
	"time"
)

// State is the health of a link, row or cell.
type State string

// States. A link is up, silent, down or connecting; rows and cells are
// up, degraded, down or connecting.
const (
	Up         State = "up"
	Degraded   State = "degraded"
	Silent     State = "silent"
	Down       State = "down"
	Connecting State = "connecting"
)

// Red reports whether s shows red: down, or silent for two intervals.
func (s State) Red() bool { return s == Down || s == Silent }

// rank orders states from best to worst, for sorting and merging.
func (s State) rank() int {
	switch s {
	case Up:
		return 0
	case Degraded:
		return 1
	case Connecting:
		return 2
	case Silent:
		return 3
	}
	return 4
}

// Path is how datagrams reach a remote gateway or site.
type Path string

// Paths. A link is direct or hub; a row or cell also standby (some of
// the remote site's gateways are down and flows go to the others), or
// none while nothing is up.
const (
	Direct  Path = "direct"
	Hub     Path = "hub"
	Standby Path = "standby"
	None    Path = ""
)

// Link is one gateway's view of one remote gateway.
type Link struct {
	Gateway string `json:"gateway"`
	State   State  `json:"state"`
	// Reason says why State is down ("no answer", "cannot deliver") or
	// silent ("no answer for 2 intervals").
	Reason string `json:"reason,omitempty"`
	Path   Path   `json:"path"`
	// Via names the hub gateways ("site/gateway") of a hub path.
	Via []string `json:"via,omitempty"`
	// RTTMs is the median probe round trip over the window, ms (0: none).
	RTTMs float64 `json:"rttMs"`
	// Loss is the share of probes unanswered over the window, 0 to 1.
	Loss float64 `json:"loss"`
	// Probes is how many probes the loss is counted over.
	Probes uint64 `json:"probes"`
	MTU    int    `json:"mtu"`
	// MTUDegraded: full-size probes go unanswered while small ones pass.
	MTUDegraded bool `json:"mtuDegraded,omitempty"`
	// IntervalMs is the probe interval in force for the link (longer
	// while it is idle), ms.
	IntervalMs float64   `json:"intervalMs"`
	LastAnswer time.Time `json:"lastAnswer,omitzero"`
}

// Row is one gateway's view of one remote site.
type Row struct {
	FromSite    string   `json:"fromSite"`
	FromGateway string   `json:"fromGateway"`
	To          string   `json:"to"`
	State       State    `json:"state"`
	Path        Path     `json:"path"`
	Via         []string `json:"via,omitempty"`
	GatewaysUp  int      `json:"gatewaysUp"`
	Gateways    int      `json:"gateways"`
	RTTMs       float64  `json:"rttMs"`
	Loss        float64  `json:"loss"`
	MTU         int      `json:"mtu"`
	// Since is when State or Path last changed (zero: unknown).
	Since time.Time `json:"since,omitzero"`
	// Measured is the newest probe answer from the site (zero: none);
	// for a row read from a Gateway status, when it was written.
	Measured time.Time `json:"measured,omitzero"`
	// Links are the per-gateway details (absent in rows read from a
	// Gateway status, which is per site).
	Links []Link `json:"links,omitempty"`
}

// Cell is one site's view of one remote site: the rows of the site's
// gateways toward it, merged.
type Cell struct {
	From  string    `json:"from"`
	To    string    `json:"to"`
	State State     `json:"state"`
	Path  Path      `json:"path"`
	Via   []string  `json:"via,omitempty"`
	RTTMs float64   `json:"rttMs"`
	Loss  float64   `json:"loss"`
	MTU   int       `json:"mtu"`
	Since time.Time `json:"since,omitzero"`
	// AgeSeconds is how old the newest measurement is, when the matrix
	// was built (-1: never measured).
	AgeSeconds float64 `json:"ageSeconds"`
	Rows       []Row   `json:"rows"`
}

// Source is one place rows came from: a gateway's endpoint, a Gateway
// object, or the gateway itself; Error is set when it could not be read.
type Source struct {
	Name  string `json:"name"`
	Rows  int    `json:"rows"`
	Error string `json:"error,omitempty"`
}

// Matrix is the whole mesh as known to whoever built it.
type Matrix struct {
	Generated time.Time `json:"generated"`
	// Sites are every site that is a row or a column, sorted.
	Sites []string `json:"sites"`
	// Cells are sorted by From, then To; a pair nobody reported is
	// absent.
	Cells   []Cell   `json:"cells"`
	Sources []Source `json:"sources,omitempty"`
	// RefreshMs is how often a live view should fetch the matrix again.
	RefreshMs int `json:"refreshMs"`
}

// Cell returns the cell from → to, if any.
func (m *Matrix) Cell(from, to string) (Cell, bool) {
	for _, c := range m.Cells {
		if c.From == from && c.To == to {
			return c, true
		}
	}
	return Cell{}, false
}

// Counts returns how many cells are in each state.
func (m *Matrix) Counts() map[State]int {
	n := map[State]int{}
	for _, c := range m.Cells {
		n[c.State]++
	}
	return n
}
