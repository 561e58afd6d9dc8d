package controller

import (
	"context"
	"slices"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/controller/azureroutes"
)

// RouteSyncer keeps a route table in step with the catalog
// (*azureroutes.Syncer; Options.AzureRoutes).
type RouteSyncer interface {
	Sync(ctx context.Context, c *config.Config) (azureroutes.Result, error)
}

// routeQKey is the one key of the route-table queue.
const routeQKey = "azure-routes"

// routeResync is the longest time between two syncs of the route table,
// whatever changed: a route edited or deleted by hand comes back.
const routeResync = 5 * time.Minute

// DefaultAzureRouteInterval is the least time between two syncs of the
// Azure route table (Options.AzureRouteInterval).
const DefaultAzureRouteInterval = 10 * time.Second

// setRoutePlan hands the sites of a publication that changed the catalog
// to the route-table worker. The catalog worker calls it.
func (c *Controller) setRoutePlan(sites []config.Site) {
	if c.opts.AzureRoutes == nil {
		return
	}
	plan := &config.Config{Sites: slices.Clone(sites)}
	c.routePlan.Store(plan)
	c.routeQueue.AddAfter(routeQKey, c.routePace.wait(c.opts.AzureRouteInterval, time.Now()))
}

// reconcileRoutes syncs the route table with the last plan handed over,
// at most once per AzureRouteInterval, and again after routeResync. A
// failed sync is retried with the queue's backoff. It runs on the route
// worker only (the leader's).
func (c *Controller) reconcileRoutes(ctx context.Context, _ string) error {
	if wait := c.routePace.wait(c.opts.AzureRouteInterval, time.Now()); wait > 0 {
		c.routeQueue.AddAfter(routeQKey, wait)
		return nil
	}
	plan := c.routePlan.Load()
	if plan == nil {
		return nil // no publication yet; setRoutePlan enqueues
	}
	defer c.routePace.done(time.Now())
	if _, err := c.opts.AzureRoutes.Sync(ctx, plan); err != nil {
		c.log.Error("azure route table not in step", "err", err)
		return err
	}
	c.routeQueue.AddAfter(routeQKey, routeResync)
	return nil
}
