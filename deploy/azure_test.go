package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const azurePath = "azure/gateway-vm.json"

type armTemplate struct {
	Schema     string           `json:"$schema"`
	Parameters map[string]any   `json:"parameters"`
	Variables  map[string]any   `json:"variables"`
	Resources  []map[string]any `json:"resources"`
	Outputs    map[string]any   `json:"outputs"`
}

// dig walks nested maps and slices: keys are map keys, ints are indexes.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %q", path, k)
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				t.Fatalf("%v: no element %d", path, k)
			}
			v = s[k]
		}
	}
	return v
}

func loadTemplate(t *testing.T) (armTemplate, []byte) {
	t.Helper()
	return loadTemplateFile(t, azurePath)
}

func loadTemplateFile(t *testing.T, path string) (armTemplate, []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tpl armTemplate
	if err := json.Unmarshal(raw, &tpl); err != nil {
		t.Fatalf("%s is not valid JSON: %v", path, err)
	}
	return tpl, raw
}

func resource(t *testing.T, tpl armTemplate, typ string) map[string]any {
	t.Helper()
	for _, r := range tpl.Resources {
		if r["type"] == typ {
			return r
		}
	}
	t.Fatalf("no %s resource", typ)
	return nil
}

func TestAzureTemplate(t *testing.T) {
	tpl, _ := loadTemplate(t)
	if !strings.Contains(tpl.Schema, "deploymentTemplate.json") {
		t.Errorf("$schema = %q, want a deployment template", tpl.Schema)
	}

	nic := resource(t, tpl, "Microsoft.Network/networkInterfaces")
	if dig(t, nic, "properties", "enableIPForwarding") != true {
		t.Error("NIC: enableIPForwarding is not true")
	}
	ipc := dig(t, nic, "properties", "ipConfigurations", 0, "properties")
	if dig(t, ipc, "privateIPAllocationMethod") != "Static" || dig(t, ipc, "privateIPAddress") != "[parameters('gatewayPrivateIp')]" {
		t.Error("NIC: private IP is not the static gatewayPrivateIp")
	}
	if id, _ := dig(t, ipc, "publicIPAddress", "id").(string); !strings.Contains(id, "Microsoft.Network/publicIPAddresses") {
		t.Error("NIC: no public IP")
	}
	if id, _ := dig(t, nic, "properties", "networkSecurityGroup", "id").(string); !strings.Contains(id, "Microsoft.Network/networkSecurityGroups") {
		t.Error("NIC: no NSG")
	}

	pip := resource(t, tpl, "Microsoft.Network/publicIPAddresses")
	if dig(t, pip, "properties", "publicIPAllocationMethod") != "Static" {
		t.Error("public IP is not static: peers would lose the endpoint on restart")
	}

	nsg := resource(t, tpl, "Microsoft.Network/networkSecurityGroups")
	rules, _ := dig(t, nsg, "properties", "securityRules").([]any)
	found := false
	for _, r := range rules {
		p := dig(t, r, "properties")
		if dig(t, p, "direction") == "Inbound" && dig(t, p, "access") == "Allow" && dig(t, p, "protocol") == "Udp" &&
			dig(t, p, "destinationPortRange") == "[string(parameters('tunnelPort'))]" {
			found = true
		}
	}
	if !found {
		t.Error("NSG: no inbound Udp allow rule for tunnelPort")
	}
	if d := dig(t, tpl.Parameters, "tunnelPort", "defaultValue"); d != 51820.0 {
		t.Errorf("tunnelPort default %v, want 51820", d)
	}

	rt := resource(t, tpl, "Microsoft.Network/routeTables")
	cp := dig(t, rt, "properties", "copy", 0)
	if dig(t, cp, "name") != "routes" || dig(t, cp, "count") != "[length(parameters('remoteSiteCidrs'))]" {
		t.Error("route table: routes are not one per remoteSiteCidrs entry")
	}
	route := dig(t, cp, "input", "properties")
	if dig(t, route, "nextHopType") != "VirtualAppliance" || dig(t, route, "nextHopIpAddress") != "[parameters('gatewayPrivateIp')]" {
		t.Error("route table: next hop is not the gateway's private IP")
	}
	if dig(t, tpl.Parameters, "remoteSiteCidrs", "type") != "array" {
		t.Error("remoteSiteCidrs is not an array parameter")
	}

	vm := resource(t, tpl, "Microsoft.Compute/virtualMachines")
	if dig(t, vm, "properties", "osProfile", "customData") != "[base64(variables('customData'))]" {
		t.Error("VM: custom data is not the rendered cloud-init")
	}
	if dig(t, vm, "properties", "osProfile", "linuxConfiguration", "disablePasswordAuthentication") != true {
		t.Error("VM: password login enabled")
	}
	if typ := dig(t, tpl.Parameters, "privateKey", "type"); !strings.EqualFold(typ.(string), "securestring") {
		t.Errorf("privateKey parameter is %v, want securestring", typ)
	}
}

// Every placeholder of the cloud-init file is filled in by the template,
// and the template fills in nothing the file does not have.
func TestAzureFillsCloudInitPlaceholders(t *testing.T) {
	tpl, _ := loadTemplate(t)
	ci, err := os.ReadFile(cloudInitPath)
	if err != nil {
		t.Fatal(err)
	}
	want := uniq(placeholder.FindAllString(string(ci), -1))
	expr, _ := tpl.Variables["customData"].(string)
	got := uniq(placeholder.FindAllString(expr, -1))
	if !slices.Equal(got, want) {
		t.Errorf("template replaces %q, cloud-init has %q", got, want)
	}
	if !strings.Contains(expr, "parameters('cloudInit')") {
		t.Error("customData is not built from the cloudInit parameter")
	}
}

// Every parameter and variable used is declared, and every declared one
// is used: catches typos ARM would only report at deployment.
func TestAzureReferences(t *testing.T) {
	for _, path := range []string{azurePath, scaleSetPath} {
		t.Run(path, func(t *testing.T) { checkReferences(t, path) })
	}
}

func checkReferences(t *testing.T, path string) {
	tpl, raw := loadTemplateFile(t, path)
	tests := []struct {
		kind     string
		re       *regexp.Regexp
		declared map[string]bool
	}{
		{"parameter", regexp.MustCompile(`parameters\('([A-Za-z0-9_]+)'\)`), keys(tpl.Parameters)},
		{"variable", regexp.MustCompile(`variables\('([A-Za-z0-9_]+)'\)`), keys(tpl.Variables)},
	}
	for _, tt := range tests {
		used := map[string]bool{}
		for _, m := range tt.re.FindAllStringSubmatch(string(raw), -1) {
			used[m[1]] = true
			if !tt.declared[m[1]] {
				t.Errorf("%s %q used but not declared", tt.kind, m[1])
			}
		}
		for name := range tt.declared {
			if !used[name] {
				t.Errorf("%s %q declared but never used", tt.kind, name)
			}
		}
	}
}

func keys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func uniq(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}
