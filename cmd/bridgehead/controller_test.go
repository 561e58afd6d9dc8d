package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/controller"
)

// TestControllerAuditIntervalFlag: --audit-interval reaches
// controller.Options (default DefaultAuditInterval, as before the flag),
// and a duration that is not positive is a usage error rather than a
// silent default.
func TestControllerAuditIntervalFlag(t *testing.T) {
	parse := func(args ...string) *controllerFlags {
		t.Helper()
		fs := flag.NewFlagSet("controller", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := newControllerFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	if got := parse().options().AuditInterval; got != controller.DefaultAuditInterval || controller.DefaultAuditInterval != time.Minute {
		t.Errorf("default audit interval %s, want %s (1m)", got, controller.DefaultAuditInterval)
	}
	f := parse("--audit-interval", "20s")
	if err := f.check(); err != nil {
		t.Fatal(err)
	}
	if got := f.options().AuditInterval; got != 20*time.Second {
		t.Errorf("--audit-interval 20s gave %s", got)
	}
	for _, v := range []string{"0s", "-1m"} {
		err := parse("--audit-interval", v).check()
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), "--audit-interval") || !asUsage(err, &ue) {
			t.Errorf("--audit-interval %s: %v, want a usage error", v, err)
		}
	}
	code, _, stderr := runCLI(t, "", "controller", "--kubeconfig", "/nonexistent", "--audit-interval", "0s")
	if first, _, _ := strings.Cut(stderr, "\n"); code != 2 || first != "bridgehead controller: --audit-interval 0s: want a positive duration" {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

func asUsage(err error, ue *usageError) bool {
	u, ok := err.(usageError)
	if ok {
		*ue = u
	}
	return ok
}

// TestControllerAzureRouteFlags: the route-table sync is off by default;
// on, it needs a route table's resource ID and a site, together.
func TestControllerAzureRouteFlags(t *testing.T) {
	const table = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg/providers/Microsoft.Network/routeTables/bh-routes"
	for _, tc := range []struct {
		args []string
		want string // "" : accepted
	}{
		{nil, ""},
		{[]string{"--azure-route-table", table, "--azure-route-site", "azure"}, ""},
		{[]string{"--azure-route-table", table}, "go together"},
		{[]string{"--azure-route-site", "azure"}, "go together"},
		{[]string{"--azure-route-table", "/subscriptions/x/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v", "--azure-route-site", "azure"}, "want a Microsoft.Network/routeTables"},
		{[]string{"--azure-route-table", "bh-routes", "--azure-route-site", "azure"}, "--azure-route-table"},
		{[]string{"--azure-route-interval", "0s"}, "want a positive duration"},
	} {
		fs := flag.NewFlagSet("controller", flag.ContinueOnError)
		f := newControllerFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := f.check()
		var ue usageError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !asUsage(err, &ue)):
			t.Errorf("%v: %v, want a usage error with %q", tc.args, err, tc.want)
		}
		if tc.want == "" && len(tc.args) == 0 {
			if s, err := f.azure.syncer(nil, nil); s != nil || err != nil {
				t.Errorf("off by default: %v %v", s, err)
			}
		}
	}
}
