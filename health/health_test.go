package health

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/router"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// peer builds a PeerState in liveness state live; received and handshake
// are ages before t0 (negative: never).
func peer(site, gw string, live router.LiveState, received, handshake time.Duration, queued int) PeerState {
	p := PeerState{Site: site, Gateway: gw, QueuedPackets: queued, Live: router.LivenessStats{State: live}}
	if received >= 0 {
		p.LastReceive = t0.Add(-received)
	}
	if handshake >= 0 {
		p.LastHandshake = t0.Add(-handshake)
	}
	return p
}

const (
	never      = -1
	up         = router.LiveUp
	down       = router.LiveDown
	connecting = router.LiveConnecting
)

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name     string
		sites    []string
		peers    []PeerState
		ready    bool // at least one remote site
		allSites bool
		want     map[string]string // site -> reason ("" when reachable)
		states   map[string]string // gateway -> state
	}{
		{
			name:  "remote gateway up",
			sites: []string{"a", "b"},
			peers: []PeerState{peer("b", "gw-b1", up, 5*time.Second, 10*time.Second, 0)},
			ready: true, allSites: true,
			want:   map[string]string{"b": ""},
			states: map[string]string{"gw-b1": StateUp},
		},
		{
			name:   "the router's state decides, not the receive time",
			sites:  []string{"a", "b"},
			peers:  []PeerState{peer("b", "gw-b1", down, 0, 10*time.Second, 0)},
			ready:  false,
			want:   map[string]string{"b": "every gateway down; last authenticated packet from gw-b1 0s ago"},
			states: map[string]string{"gw-b1": StateDown},
		},
		{
			name:  "a draining gateway keeps its site reachable",
			sites: []string{"a", "b"},
			peers: []PeerState{func() PeerState {
				p := peer("b", "gw-b1", down, 0, 10*time.Second, 0)
				p.Live.Reason = router.DownDraining
				return p
			}()},
			ready: true, allSites: true,
			want:   map[string]string{"b": ""},
			states: map[string]string{"gw-b1": StateDraining},
		},
		{
			name:   "queued packets without a session are connecting",
			sites:  []string{"a", "b"},
			peers:  []PeerState{peer("b", "gw-b1", connecting, never, never, 3)},
			want:   map[string]string{"b": "connecting: no authenticated packet received yet"},
			states: map[string]string{"gw-b1": StateConnecting},
		},
		{
			name:   "handshake without liveness is connecting, not up",
			sites:  []string{"a", "b"},
			peers:  []PeerState{peer("b", "gw-b1", connecting, never, time.Second, 0)},
			want:   map[string]string{"b": "connecting: no authenticated packet received yet"},
			states: map[string]string{"gw-b1": StateConnecting},
		},
		{
			name:   "nothing at all is never",
			sites:  []string{"a", "b"},
			peers:  []PeerState{peer("b", "gw-b1", connecting, never, never, 0)},
			want:   map[string]string{"b": "no packet ever received from any gateway"},
			states: map[string]string{"gw-b1": StateNever},
		},
		{
			name:   "a site without gateways is unreachable; another keeps the gateway ready",
			sites:  []string{"a", "b", "c"},
			peers:  []PeerState{peer("b", "gw-b1", up, time.Second, never, 0)},
			ready:  true,
			want:   map[string]string{"b": "", "c": "no gateways configured"},
			states: map[string]string{"gw-b1": StateUp},
		},
		{
			name:  "one gateway up is enough for its site",
			sites: []string{"a", "b"},
			peers: []PeerState{
				peer("b", "gw-b1", down, time.Minute, never, 0),
				peer("b", "gw-b2", up, 2*time.Second, never, 0),
			},
			ready: true, allSites: true,
			want:   map[string]string{"b": ""},
			states: map[string]string{"gw-b1": StateDown, "gw-b2": StateUp},
		},
		{
			name:  "down reason names the gateway heard from last",
			sites: []string{"a", "b"},
			peers: []PeerState{
				peer("b", "gw-b1", down, 10*time.Minute, never, 0),
				peer("b", "gw-b2", down, 3*time.Minute, never, 2),
				peer("b", "gw-b3", connecting, never, never, 1),
			},
			want:   map[string]string{"b": "every gateway down; last authenticated packet from gw-b2 3m0s ago"},
			states: map[string]string{"gw-b1": StateDown, "gw-b2": StateDown, "gw-b3": StateConnecting},
		},
		{
			name:  "no remote site reachable: not ready",
			sites: []string{"a", "b", "c"},
			peers: []PeerState{
				peer("b", "gw-b1", down, time.Second, never, 0),
				peer("c", "gw-c1", connecting, never, never, 0),
			},
			want:   map[string]string{"b": "every gateway down; last authenticated packet from gw-b1 1s ago", "c": "no packet ever received from any gateway"},
			states: map[string]string{"gw-b1": StateDown, "gw-c1": StateNever},
		},
		{
			name:  "local site and unknown sites are ignored",
			sites: []string{"a", "b"},
			peers: []PeerState{
				peer("a", "gw-a2", connecting, never, never, 0),
				peer("z", "gw-z1", up, never, never, 0),
				peer("b", "gw-b1", up, time.Second, never, 0),
			},
			ready: true, allSites: true,
			want:   map[string]string{"b": ""},
			states: map[string]string{"gw-b1": StateUp},
		},
		{
			name:  "no remote sites is ready",
			sites: []string{"a"},
			ready: true, allSites: true,
			want:   map[string]string{},
			states: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := Evaluate("a", tt.sites, tt.peers, t0)
			if rep.Ready != tt.ready || rep.AllSites != tt.allSites {
				t.Errorf("Ready, AllSites = %v, %v, want %v, %v (%+v)", rep.Ready, rep.AllSites, tt.ready, tt.allSites, rep)
			}
			if rep.Sites == nil {
				t.Errorf("Sites is nil, want an empty slice (it is JSON)")
			}
			got := map[string]string{}
			states := map[string]string{}
			for _, s := range rep.Sites {
				if s.Site == "a" {
					t.Errorf("local site reported: %+v", s)
				}
				if s.Ready != (s.Reason == "") {
					t.Errorf("site %s: Ready %v with reason %q", s.Site, s.Ready, s.Reason)
				}
				got[s.Site] = s.Reason
				for _, g := range s.Gateways {
					states[g.Gateway] = g.State
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("site reasons = %q, want %q", got, tt.want)
			}
			if !reflect.DeepEqual(states, tt.states) {
				t.Errorf("gateway states = %q, want %q", states, tt.states)
			}
		})
	}
}

func TestEvaluateOrder(t *testing.T) {
	peers := []PeerState{
		peer("c", "gw-c2", up, time.Second, never, 0),
		peer("b", "gw-b1", up, time.Second, never, 0),
		peer("c", "gw-c1", down, 2*time.Hour, never, 0),
	}
	rep := Evaluate("a", []string{"c", "a", "b"}, peers, t0)
	var got []string
	for _, s := range rep.Sites {
		got = append(got, s.Site)
		for _, g := range s.Gateways {
			got = append(got, g.Gateway)
		}
	}
	want := []string{"c", "gw-c2", "gw-c1", "b", "gw-b1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order = %q, want %q", got, want)
	}
	if lr := rep.Sites[0].Gateways[1].LastReceive; !lr.Equal(t0.Add(-2 * time.Hour)) {
		t.Errorf("LastReceive = %v, want %v", lr, t0.Add(-2*time.Hour))
	}
}

func TestPeerStates(t *testing.T) {
	in := router.PeerStats{
		Site: "b", Name: "gw-b1", Endpoint: netip.MustParseAddrPort("203.0.113.7:51820"),
		TxPackets: 1, TxBytes: 2, RxPackets: 3, RxBytes: 4,
		LastHandshake: t0.Add(-time.Minute), LastReceive: t0.Add(-time.Second),
		SessionCreated: t0.Add(-2 * time.Minute), QueuedPackets: 5, Keepalive: 25 * time.Second,
		Down: true, Live: router.LivenessStats{State: router.LiveDown, Downs: 2},
		HandshakesPreviousKey: 6, HandshakesSecondPSK: 7, PSKMismatches: 8, PreviousKeyUntil: t0.Add(time.Hour),
		LaneBytes: true, Express: true,
	}
	want := PeerState{
		Site: "b", Gateway: "gw-b1", Endpoint: in.Endpoint,
		LastHandshake: in.LastHandshake, LastReceive: in.LastReceive,
		TxBytes: 2, RxBytes: 4, TxPackets: 1, RxPackets: 3,
		SessionCreated: in.SessionCreated, QueuedPackets: 5, Keepalive: 25 * time.Second,
		Down: true, Live: in.Live, LaneBytes: true, Express: true,
		HandshakesPreviousKey: 6, HandshakesSecondPSK: 7, PSKMismatches: 8, PreviousKeyUntil: in.PreviousKeyUntil,
	}
	got := PeerStates([]router.PeerStats{in})
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("PeerStates = %+v, want %+v", got, want)
	}
	// A field added to router.PeerStats must be carried over here too
	// (PeerState adds Path, Via and DirectAt, which the daemon sets).
	if a, b := reflect.TypeFor[router.PeerStats]().NumField(), reflect.TypeFor[PeerState]().NumField()-3; a != b {
		t.Errorf("router.PeerStats has %d fields, PeerState %d: update PeerStates", a, b)
	}
	if got := PeerStates(nil); got == nil || len(got) != 0 {
		t.Errorf("PeerStates(nil) = %#v, want empty non-nil", got)
	}
}

func TestPathText(t *testing.T) {
	for _, tc := range []struct {
		p    PeerState
		want string
	}{
		{PeerState{Path: PathDirect}, "direct"},
		{PeerState{Path: PathDirect, DirectAt: "203.0.113.12:51820"}, "direct to 203.0.113.12:51820"},
		{PeerState{Path: PathHub, Via: []string{"a/gw-a1"}}, "via hub a/gw-a1"},
		{PeerState{Path: PathHub, Via: []string{"a/gw-a1", "b/gw-b1"}}, "via hub a/gw-a1, b/gw-b1"},
		{PeerState{Path: PathHub}, "via hub (no session)"},
		{PeerState{}, "-"},
	} {
		if got := tc.p.PathText(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.p, got, tc.want)
		}
	}
}
