// Package armfake is Azure Resource Manager's routes API for one route
// table, served over TLS for the real armnetwork client, for tests of
// the route-table sync (package azureroutes and the controller).
package armfake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
)

// Server is Azure Resource Manager's routes API for one route table, as
// armnetwork 2024-05-01 speaks it: bearer tokens required, the
// api-version checked, names and prefixes validated as Azure does (route
// names 1-80 characters of letters, digits, '_', '.', '-'; names
// case-insensitive; canonical CIDRs; no two routes with one prefix; a
// VirtualAppliance hop needs an address; 400 routes a table), list pages
// with nextLink, PUT answering 201/200 and DELETE 202/204 with an
// Azure-AsyncOperation to poll (and a Location for DELETE), 429 with
// Retry-After when throttling, and injected 500s.
type Server struct {
	srv *httptest.Server
	// Subscription, ResourceGroup and RouteTable name the one table.
	Subscription, ResourceGroup, RouteTable string
	pageSize                                int

	mu       sync.Mutex
	routes   map[string]Route // by lower-case name
	ops      map[string]int   // operation id -> InProgress answers left
	nextOp   int
	throttle int             // write requests still to answer 429
	fail     map[string]bool // lower-case route names whose PUT answers 500
	writes   int             // PUT and DELETE requests received (retries included)
	lists    int             // list pages served
}

// Route is a route as the fake stores it.
type Route struct {
	Name, Prefix, HopType, HopIP string
	Etag                         int
}

// Edit runs fn on the table's routes (by lower-case name) under the
// fake's lock: a hand edit of the table.
func (f *Server) Edit(fn func(routes map[string]Route)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.routes)
}

// Throttle makes the next n PUT or DELETE requests answer 429.
func (f *Server) Throttle(n int) { f.mu.Lock(); f.throttle = n; f.mu.Unlock() }

// Fail makes PUTs of route name answer 500 (or not).
func (f *Server) Fail(name string, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fail {
		f.fail[strings.ToLower(name)] = true
	} else {
		delete(f.fail, strings.ToLower(name))
	}
}

// Requests is the PUT and DELETE requests (retries included) and the
// list pages served so far.
func (f *Server) Requests() (writes, listPages int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes, f.lists
}

// PageSize is the routes of one list page.
func (f *Server) PageSize() int { return f.pageSize }

// New starts a fake with an empty table, stopped at t's end.
func New(t testing.TB) *Server {
	f := &Server{Subscription: "00000000-0000-0000-0000-000000000001", ResourceGroup: "bh-rg", RouteTable: "bh-routes", pageSize: 7,
		routes: map[string]Route{}, ops: map[string]int{}, fail: map[string]bool{}}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// Client is a real armnetwork.RoutesClient that talks to the fake.
func (f *Server) Client(t testing.TB) *armnetwork.RoutesClient {
	opts := &arm.ClientOptions{ClientOptions: policy.ClientOptions{
		Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: f.srv.URL + "/aad/", Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
			cloud.ResourceManager: {Endpoint: f.srv.URL, Audience: "https://management.azure.com"}}},
		Transport: f.srv.Client(),
		Retry:     policy.RetryOptions{MaxRetries: 3, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond},
	}}
	c, err := armnetwork.NewRoutesClient(f.Subscription, staticToken{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type staticToken struct{}

func (staticToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: "fake-token", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

var routeName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,78}[A-Za-z0-9_])?$`)

func armError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-ms-error-code", code)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (f *Server) routeJSON(r Route, state string) map[string]any {
	props := map[string]any{"addressPrefix": r.Prefix, "nextHopType": r.HopType, "provisioningState": state, "hasBgpOverride": false}
	if r.HopIP != "" {
		props["nextHopIpAddress"] = r.HopIP
	}
	return map[string]any{
		"name": r.Name, "id": f.tablePath() + "/routes/" + r.Name, "etag": fmt.Sprintf(`W/"%d"`, r.Etag),
		"type": "Microsoft.Network/routeTables/routes", "properties": props,
	}
}

func (f *Server) tablePath() string {
	return "/subscriptions/" + f.Subscription + "/resourceGroups/" + f.ResourceGroup + "/providers/Microsoft.Network/routeTables/" + f.RouteTable
}

func (f *Server) serve(w http.ResponseWriter, req *http.Request) {
	if req.Header.Get("Authorization") != "Bearer fake-token" {
		armError(w, http.StatusUnauthorized, "AuthenticationFailed", "no bearer token")
		return
	}
	if v := req.URL.Query().Get("api-version"); v != "2024-05-01" {
		armError(w, http.StatusBadRequest, "InvalidApiVersionParameter", "api-version "+v)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	path := req.URL.Path
	if id, ok := strings.CutPrefix(path, "/subscriptions/"+f.Subscription+"/providers/Microsoft.Network/locations/westeurope/operations/"); ok && req.Method == http.MethodGet {
		left, known := f.ops[id]
		switch {
		case !known:
			armError(w, http.StatusNotFound, "NotFound", "operation "+id)
		case left > 0:
			f.ops[id] = left - 1
			w.Header().Set("Retry-After", "1")
			json.NewEncoder(w).Encode(map[string]string{"status": "InProgress"})
		default:
			json.NewEncoder(w).Encode(map[string]string{"status": "Succeeded"})
		}
		return
	}
	if _, ok := strings.CutPrefix(path, "/subscriptions/"+f.Subscription+"/providers/Microsoft.Network/locations/westeurope/operationResults/"); ok {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	rest, ok := cutPrefixFold(path, f.tablePath()+"/routes")
	if !ok {
		armError(w, http.StatusNotFound, "ResourceNotFound", "no resource "+path)
		return
	}
	name := strings.TrimPrefix(rest, "/")
	if name == "" {
		if req.Method != http.MethodGet {
			armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", req.Method)
			return
		}
		f.list(w, req)
		return
	}
	if (req.Method == http.MethodPut || req.Method == http.MethodDelete) && f.throttle > 0 {
		f.throttle--
		f.writes++
		w.Header().Set("Retry-After", "0")
		armError(w, http.StatusTooManyRequests, "RetryableError", "too many requests")
		return
	}
	key := strings.ToLower(name)
	switch req.Method {
	case http.MethodGet:
		r, ok := f.routes[key]
		if !ok {
			armError(w, http.StatusNotFound, "NotFound", "route "+name)
			return
		}
		json.NewEncoder(w).Encode(f.routeJSON(r, "Succeeded"))
	case http.MethodPut:
		f.writes++
		f.put(w, req, name, key)
	case http.MethodDelete:
		f.writes++
		if _, ok := f.routes[key]; !ok {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		delete(f.routes, key)
		id := f.op()
		w.Header().Set("Azure-AsyncOperation", f.srv.URL+"/subscriptions/"+f.Subscription+"/providers/Microsoft.Network/locations/westeurope/operations/"+id+"?api-version=2024-05-01")
		w.Header().Set("Location", f.srv.URL+"/subscriptions/"+f.Subscription+"/providers/Microsoft.Network/locations/westeurope/operationResults/"+id+"?api-version=2024-05-01")
		w.WriteHeader(http.StatusAccepted)
	default:
		armError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", req.Method)
	}
}

func (f *Server) op() string {
	f.nextOp++
	id := fmt.Sprintf("op-%d", f.nextOp)
	f.ops[id] = 0 // done at the first poll
	return id
}

func (f *Server) put(w http.ResponseWriter, req *http.Request, name, key string) {
	if !routeName.MatchString(name) {
		armError(w, http.StatusBadRequest, "InvalidResourceName", "route name "+name)
		return
	}
	if f.fail[key] {
		armError(w, http.StatusInternalServerError, "InternalServerError", "injected")
		return
	}
	var body struct {
		Properties struct {
			AddressPrefix    string `json:"addressPrefix"`
			NextHopType      string `json:"nextHopType"`
			NextHopIPAddress string `json:"nextHopIpAddress"`
		} `json:"properties"`
	}
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
		armError(w, http.StatusBadRequest, "InvalidRequestContent", err.Error())
		return
	}
	p := body.Properties
	pf, err := netip.ParsePrefix(p.AddressPrefix)
	if err != nil || pf.Masked() != pf {
		armError(w, http.StatusBadRequest, "InvalidCIDRNotation", "addressPrefix "+p.AddressPrefix)
		return
	}
	if p.NextHopType == "VirtualAppliance" {
		if a, err := netip.ParseAddr(p.NextHopIPAddress); err != nil || a.Is4() != pf.Addr().Is4() {
			armError(w, http.StatusBadRequest, "InvalidNextHopIpAddress", "nextHopIpAddress "+p.NextHopIPAddress)
			return
		}
	} else if p.NextHopType == "" {
		armError(w, http.StatusBadRequest, "MissingJsonProperty", "nextHopType")
		return
	}
	for k, r := range f.routes {
		if k != key && r.Prefix == pf.String() {
			armError(w, http.StatusBadRequest, "InvalidRouteTableDuplicateAddressPrefix", "routes "+r.Name+" and "+name+" have address prefix "+r.Prefix)
			return
		}
	}
	old, exists := f.routes[key]
	if !exists && len(f.routes) >= 400 {
		armError(w, http.StatusBadRequest, "RouteTableRouteLimitExceeded", "400 routes")
		return
	}
	r := Route{Name: name, Prefix: pf.String(), HopType: p.NextHopType, HopIP: p.NextHopIPAddress, Etag: old.Etag + 1}
	if exists {
		r.Name = old.Name // Azure keeps the name as first created
	}
	f.routes[key] = r
	w.Header().Set("Azure-AsyncOperation", f.srv.URL+"/subscriptions/"+f.Subscription+"/providers/Microsoft.Network/locations/westeurope/operations/"+f.op()+"?api-version=2024-05-01")
	w.Header().Set("Content-Type", "application/json")
	if exists {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusCreated)
	}
	json.NewEncoder(w).Encode(f.routeJSON(r, "Updating"))
}

func (f *Server) list(w http.ResponseWriter, req *http.Request) {
	f.lists++
	keys := make([]string, 0, len(f.routes))
	for k := range f.routes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	skip, _ := strconv.Atoi(req.URL.Query().Get("$skiptoken"))
	end := min(skip+f.pageSize, len(keys))
	page := map[string]any{"value": []any{}}
	var vals []any
	for _, k := range keys[min(skip, len(keys)):end] {
		vals = append(vals, f.routeJSON(f.routes[k], "Succeeded"))
	}
	if vals != nil {
		page["value"] = vals
	}
	if end < len(keys) {
		q := req.URL.Query()
		q.Set("$skiptoken", strconv.Itoa(end))
		page["nextLink"] = f.srv.URL + req.URL.Path + "?" + q.Encode()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(page)
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

// Contents is the table's routes as "name prefix via", sorted.
func (f *Server) Contents() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.routes {
		out = append(out, r.Name+" "+r.Prefix+" "+r.HopIP)
	}
	sort.Strings(out)
	return out
}
