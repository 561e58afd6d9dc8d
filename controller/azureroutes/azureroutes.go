package azureroutes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/promreg"
	"github.com/bridgehead/bridgehead/noderoutes"
)

// MaxRoutes is Azure's limit of routes in one route table.
const MaxRoutes = 400

// Owned is the name prefix of the routes a Syncer owns (noderoutes'
// Azure route names all start with it).
const Owned = "bh-"

// RoutesClient is the part of *armnetwork.RoutesClient a Syncer uses.
type RoutesClient interface {
	NewListPager(resourceGroup, routeTable string, options *armnetwork.RoutesClientListOptions) *runtime.Pager[armnetwork.RoutesClientListResponse]
	BeginCreateOrUpdate(ctx context.Context, resourceGroup, routeTable, route string, params armnetwork.Route, options *armnetwork.RoutesClientBeginCreateOrUpdateOptions) (*runtime.Poller[armnetwork.RoutesClientCreateOrUpdateResponse], error)
	BeginDelete(ctx context.Context, resourceGroup, routeTable, route string, options *armnetwork.RoutesClientBeginDeleteOptions) (*runtime.Poller[armnetwork.RoutesClientDeleteResponse], error)
}

// Options are a Syncer's dependencies.
type Options struct {
	Client        RoutesClient
	ResourceGroup string
	RouteTable    string
	// Site is the site whose node subnet the table serves.
	Site     string
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Parallel bounds the writes in flight (default 4).
	Parallel int
}

// Syncer keeps one route table in step; see the package doc.
type Syncer struct {
	o Options
	m metrics
}

// Result is what one Sync did.
type Result struct {
	Wanted, Created, Updated, Deleted, Unchanged int
}

// New makes a Syncer.
func New(o Options) (*Syncer, error) {
	if o.Client == nil || o.ResourceGroup == "" || o.RouteTable == "" || o.Site == "" {
		return nil, errors.New("azureroutes: Client, ResourceGroup, RouteTable and Site are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	s := &Syncer{o: o}
	if err := s.m.register(o.Registry); err != nil {
		return nil, err
	}
	return s, nil
}

// route is a route as compared: destination and next hop.
type route struct {
	prefix, via string
}

// Sync makes the table's owned routes exactly the ones c's site needs.
func (s *Syncer) Sync(ctx context.Context, c *config.Config) (Result, error) {
	res, err := s.sync(ctx, c)
	result := "ok"
	if err != nil {
		result = "error"
	}
	s.m.syncs.WithLabelValues(result).Inc()
	return res, err
}

func (s *Syncer) sync(ctx context.Context, c *config.Config) (Result, error) {
	var res Result
	desired, err := noderoutes.AzureRoutes(c, s.o.Site)
	if err != nil {
		return res, fmt.Errorf("azureroutes: %w", err)
	}
	want := make(map[string]route, len(desired))
	for _, r := range desired {
		want[strings.ToLower(r.Name)] = route{r.Destination.Masked().String(), r.Via.String()}
	}
	res.Wanted = len(want)
	have, others, err := s.list(ctx)
	if err != nil {
		return res, err
	}
	if n := len(want) + others; n > MaxRoutes {
		return res, fmt.Errorf("azureroutes: site %q needs %d routes (%d of them nodes' pod ranges) and the table holds %d others: over Azure's %d routes per route table; aggregate the remote sites' CIDRs or use fewer, larger sites", s.o.Site, len(want), countNodes(desired), others, MaxRoutes)
	}
	var puts []noderoutes.AzureRoute
	for _, r := range desired {
		cur, ok := have[strings.ToLower(r.Name)]
		switch {
		case !ok:
			res.Created++
			puts = append(puts, r)
		case cur != want[strings.ToLower(r.Name)]:
			res.Updated++
			puts = append(puts, r)
		default:
			res.Unchanged++
		}
	}
	var dels []string
	for name := range have {
		if _, ok := want[name]; !ok {
			dels = append(dels, name)
		}
	}
	sort.Strings(dels)
	res.Deleted = len(dels)
	// Creates and updates first: a node that moved keeps a route
	// throughout; deletes after.
	err = s.each(len(puts), func(i int) error { return s.put(ctx, puts[i]) })
	if err == nil {
		err = s.each(len(dels), func(i int) error { return s.delete(ctx, dels[i]) })
	}
	s.m.routes.Set(float64(len(want)))
	if err != nil {
		return res, err
	}
	if len(puts)+len(dels) > 0 {
		s.o.Log.Info("azure route table synced", "route_table", s.o.RouteTable, "site", s.o.Site, "routes", len(want),
			"created", res.Created, "updated", res.Updated, "deleted", res.Deleted)
	}
	return res, nil
}

func countNodes(rs []noderoutes.AzureRoute) int {
	n := 0
	for _, r := range rs {
		if r.Node != "" {
			n++
		}
	}
	return n
}

// list reads the table's owned routes by lower-case name (Azure names
// are case-insensitive), and counts the others.
func (s *Syncer) list(ctx context.Context) (map[string]route, int, error) {
	have := map[string]route{}
	others := 0
	pager := s.o.Client.NewListPager(s.o.ResourceGroup, s.o.RouteTable, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		s.m.requests.WithLabelValues("list", result(err)).Inc()
		if err != nil {
			return nil, 0, fmt.Errorf("azureroutes: list routes of %s: %w", s.o.RouteTable, err)
		}
		for _, r := range page.Value {
			if r == nil || r.Name == nil {
				continue
			}
			if !strings.HasPrefix(strings.ToLower(*r.Name), Owned) {
				others++
				continue
			}
			var cur route
			if p := r.Properties; p != nil {
				if p.AddressPrefix != nil {
					if pf, err := netip.ParsePrefix(*p.AddressPrefix); err == nil {
						cur.prefix = pf.Masked().String()
					} else {
						cur.prefix = *p.AddressPrefix
					}
				}
				if p.NextHopIPAddress != nil && p.NextHopType != nil && *p.NextHopType == armnetwork.RouteNextHopTypeVirtualAppliance {
					cur.via = *p.NextHopIPAddress
				}
			}
			have[strings.ToLower(*r.Name)] = cur
		}
	}
	return have, others, nil
}

func (s *Syncer) put(ctx context.Context, r noderoutes.AzureRoute) error {
	params := armnetwork.Route{Properties: &armnetwork.RoutePropertiesFormat{
		AddressPrefix:    ptr(r.Destination.Masked().String()),
		NextHopType:      ptr(armnetwork.RouteNextHopTypeVirtualAppliance),
		NextHopIPAddress: ptr(r.Via.String()),
	}}
	poller, err := s.o.Client.BeginCreateOrUpdate(ctx, s.o.ResourceGroup, s.o.RouteTable, r.Name, params, nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, pollEvery)
	}
	s.m.requests.WithLabelValues("put", result(err)).Inc()
	if err != nil {
		return fmt.Errorf("azureroutes: route %s (%s via %s): %w", r.Name, r.Destination, r.Via, err)
	}
	return nil
}

func (s *Syncer) delete(ctx context.Context, name string) error {
	poller, err := s.o.Client.BeginDelete(ctx, s.o.ResourceGroup, s.o.RouteTable, name, nil)
	if err == nil {
		_, err = poller.PollUntilDone(ctx, pollEvery)
	}
	s.m.requests.WithLabelValues("delete", result(err)).Inc()
	if err != nil {
		return fmt.Errorf("azureroutes: delete route %s: %w", name, err)
	}
	return nil
}

// each runs f(0..n-1), Parallel at a time, and joins the errors.
func (s *Syncer) each(n int, f func(int) error) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, s.o.Parallel)
	)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pollEvery polls a route's operation every second when the answer
// names no Retry-After (azcore's default is 30 s; a route takes seconds).
var pollEvery = &runtime.PollUntilDoneOptions{Frequency: time.Second}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

func ptr[T any](v T) *T { return &v }

// metrics are the Syncer's Prometheus metrics.
type metrics struct {
	syncs    *prometheus.CounterVec // result
	requests *prometheus.CounterVec // op (list, put, delete), result
	routes   prometheus.Gauge
}

func (m *metrics) register(reg prometheus.Registerer) error {
	m.syncs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_azure_route_syncs_total",
		Help: "Syncs of the Azure route table by result (ok, error)."}, []string{"result"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_azure_route_requests_total",
		Help: "Azure Resource Manager requests of the route-table sync by op (list, put, delete) and result (ok, error); a put or delete counts once, polling included."}, []string{"op", "result"})
	m.routes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_controller_azure_routes",
		Help: "Routes the site's Azure route table should hold (owned ones, named bh-*)."})
	if err := promreg.Register(reg, m.syncs, m.requests, m.routes); err != nil {
		return err
	}
	for _, r := range []string{"ok", "error"} {
		m.syncs.WithLabelValues(r)
		for _, op := range []string{"list", "put", "delete"} {
			m.requests.WithLabelValues(op, r)
		}
	}
	return nil
}
