package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/controller"
	"github.com/bridgehead/bridgehead/controller/azureroutes"
)

// azureRouteFlags opt the controller into keeping a site's Azure route
// table in step with the catalog (controller/azureroutes).
type azureRouteFlags struct {
	table, site string
	interval    time.Duration
}

func (a *azureRouteFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&a.table, "azure-route-table", "", "keep this Azure route table (`RESOURCE-ID`, /subscriptions/.../resourceGroups/.../providers/Microsoft.Network/routeTables/NAME) in step with the catalog: each node of --azure-route-site's pod range via the node, the other sites' CIDRs via the site's routerAddress (empty: off; the credential is Azure's default: workload identity or a managed identity)")
	fs.StringVar(&a.site, "azure-route-site", "", "the `SITE` whose node subnet --azure-route-table serves")
	fs.DurationVar(&a.interval, "azure-route-interval", controller.DefaultAzureRouteInterval, "least time between two syncs of --azure-route-table (`DURATION`)")
}

func (a *azureRouteFlags) check() error {
	if (a.table == "") != (a.site == "") {
		return usageError{fmt.Errorf("--azure-route-table and --azure-route-site go together")}
	}
	if a.interval <= 0 {
		return usageError{fmt.Errorf("--azure-route-interval %s: want a positive duration", a.interval)}
	}
	if a.table != "" {
		if _, err := a.resource(); err != nil {
			return usageError{err}
		}
	}
	return nil
}

func (a *azureRouteFlags) resource() (*arm.ResourceID, error) {
	id, err := arm.ParseResourceID(a.table)
	if err != nil {
		return nil, fmt.Errorf("--azure-route-table: %w", err)
	}
	if !strings.EqualFold(id.ResourceType.String(), "Microsoft.Network/routeTables") {
		return nil, fmt.Errorf("--azure-route-table %s: a %s, want a Microsoft.Network/routeTables", a.table, id.ResourceType)
	}
	return id, nil
}

// syncer is the route-table syncer the flags ask for, nil when off.
func (a *azureRouteFlags) syncer(log *slog.Logger, reg prometheus.Registerer) (controller.RouteSyncer, error) {
	if a.table == "" {
		return nil, nil
	}
	id, err := a.resource()
	if err != nil {
		return nil, err
	}
	cred, err := azidentity.NewDefaultAzureCredential(nil)
	if err != nil {
		return nil, fmt.Errorf("--azure-route-table: credential: %w", err)
	}
	client, err := armnetwork.NewRoutesClient(id.SubscriptionID, cred, nil)
	if err != nil {
		return nil, fmt.Errorf("--azure-route-table: %w", err)
	}
	s, err := azureroutes.New(azureroutes.Options{Client: client, ResourceGroup: id.ResourceGroupName, RouteTable: id.Name,
		Site: a.site, Log: log, Registry: reg})
	if err != nil {
		return nil, err
	}
	log.Info("keeping the Azure route table in step", "route_table", a.table, "site", a.site, "interval", a.interval)
	return s, nil
}
