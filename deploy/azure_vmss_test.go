package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The scale-set template: gateway.bicep is the source, gateway.json its
// compiled form. The bicep CLI cannot be installed on the build machines
// (it is not packaged by Debian and downloads are not allowed), so
// TestAzureBicepMatchesJSON checks the two against each other instead of
// compiling.
const (
	scaleSetPath = "azure/gateway.json"
	bicepPath    = "azure/gateway.bicep"
)

func TestAzureScaleSetTemplate(t *testing.T) {
	tpl, _ := loadTemplateFile(t, scaleSetPath)
	if !strings.Contains(tpl.Schema, "deploymentTemplate.json") {
		t.Errorf("$schema = %q, want a deployment template", tpl.Schema)
	}
	// The parameters the operator sets, as the issue lists them.
	for _, p := range []string{"siteName", "subnetId", "remoteSiteCidrs", "peerGatewayAddresses", "instanceCount", "vmSize", "imageId", "cloudInit", "loadBalancerFrontendIp"} {
		if tpl.Parameters[p] == nil {
			t.Errorf("no parameter %s", p)
		}
	}
	if d := dig(t, tpl.Parameters, "instanceCount", "defaultValue"); d != float64(2) {
		t.Errorf("instanceCount default %v, want 2", d)
	}

	vmss := resource(t, tpl, "Microsoft.Compute/virtualMachineScaleSets")
	if c := dig(t, vmss, "sku", "capacity"); c != "[parameters('instanceCount')]" {
		t.Errorf("scale set capacity %v, want the instanceCount parameter", c)
	}
	if dig(t, vmss, "properties", "overprovision") != false {
		t.Error("overprovision must be off: extra instances would generate keys and vanish")
	}
	if m := dig(t, vmss, "properties", "upgradePolicy", "mode"); m != "Manual" {
		t.Errorf("upgrade policy %v, want Manual (a reimage loses the instance's key)", m)
	}
	vm := dig(t, vmss, "properties", "virtualMachineProfile")
	if id := dig(t, vm, "storageProfile", "imageReference", "id"); id != "[parameters('imageId')]" {
		t.Errorf("image %v, want the imageId parameter", id)
	}
	if dig(t, vm, "osProfile", "linuxConfiguration", "disablePasswordAuthentication") != true {
		t.Error("password login enabled")
	}
	if cd, _ := dig(t, vm, "osProfile", "customData").(string); !strings.Contains(cd, "parameters('cloudInit')") {
		t.Errorf("customData %q is not the cloudInit parameter", cd)
	}
	nic := dig(t, vm, "networkProfile", "networkInterfaceConfigurations", 0, "properties")
	if dig(t, nic, "enableIPForwarding") != true {
		t.Error("NIC: enableIPForwarding is not true")
	}
	if dig(t, nic, "networkSecurityGroup", "id") == nil {
		t.Error("NIC: no NSG")
	}
	ipc := dig(t, nic, "ipConfigurations", 0, "properties")
	if dig(t, ipc, "publicIPAddressConfiguration") == nil {
		t.Error("NIC: no public IP per instance")
	}
	if pool, _ := dig(t, ipc, "loadBalancerBackendAddressPools", 0, "id").(string); !strings.HasSuffix(pool, "/backendAddressPools/gateways', variables('lbId'))]") {
		t.Errorf("NIC: not in the load balancer's pool: %q", pool)
	}

	// NSG: the tunnel port only from the peers, never from anywhere.
	nsg := resource(t, tpl, "Microsoft.Network/networkSecurityGroups")
	rules, _ := dig(t, nsg, "properties", "securityRules").([]any)
	tunnel := false
	for i := range rules {
		r := dig(t, rules, i, "properties").(map[string]any)
		if r["access"] != "Allow" || r["direction"] != "Inbound" {
			continue
		}
		if r["destinationPortRange"] == "[string(parameters('tunnelPort'))]" {
			tunnel = true
			if r["protocol"] != "Udp" || r["sourceAddressPrefixes"] != "[parameters('peerGatewayAddresses')]" || r["sourceAddressPrefix"] != nil {
				t.Errorf("tunnel rule %v: want Udp from peerGatewayAddresses only", r)
			}
		}
		for _, open := range []string{"*", "Internet", "0.0.0.0/0"} {
			if r["sourceAddressPrefix"] == open {
				t.Errorf("NSG rule %v allows %s", r, open)
			}
		}
	}
	if !tunnel {
		t.Error("NSG: no rule admitting the tunnel port")
	}

	// Internal Standard load balancer, HA ports, /readyz probe.
	lb := resource(t, tpl, "Microsoft.Network/loadBalancers")
	if dig(t, lb, "sku", "name") != "Standard" {
		t.Error("load balancer is not Standard (HA ports needs Standard)")
	}
	fe := dig(t, lb, "properties", "frontendIPConfigurations", 0, "properties").(map[string]any)
	if fe["publicIPAddress"] != nil || fe["subnet"] == nil {
		t.Error("load balancer frontend is not internal (a subnet, no public IP)")
	}
	if fe["privateIPAddress"] != "[parameters('loadBalancerFrontendIp')]" {
		t.Errorf("frontend IP %v, want the loadBalancerFrontendIp parameter", fe["privateIPAddress"])
	}
	rule := dig(t, lb, "properties", "loadBalancingRules", 0, "properties").(map[string]any)
	if rule["protocol"] != "All" || rule["frontendPort"] != float64(0) || rule["backendPort"] != float64(0) {
		t.Errorf("rule %v is not HA ports (All, 0, 0)", rule)
	}
	if probe, _ := dig(t, rule, "probe", "id").(string); !strings.Contains(probe, "/probes/readyz") {
		t.Errorf("rule probe %q is not the readyz probe", probe)
	}
	probe := dig(t, lb, "properties", "probes", 0).(map[string]any)
	if dig(t, probe, "name") != "readyz" || dig(t, probe, "properties", "protocol") != "Http" ||
		dig(t, probe, "properties", "requestPath") != "/readyz" || dig(t, probe, "properties", "port") != "[parameters('healthPort')]" {
		t.Errorf("probe %v: want HTTP /readyz on healthPort", probe)
	}
	if d := dig(t, tpl.Parameters, "healthPort", "defaultValue"); d != float64(9641) {
		t.Errorf("healthPort default %v, want bridgehead's 9641", d)
	}

	// Routes to the load balancer, as a virtual appliance.
	rt := resource(t, tpl, "Microsoft.Network/routeTables")
	routes := dig(t, rt, "properties", "copy", 0)
	if dig(t, routes, "count") != "[length(parameters('remoteSiteCidrs'))]" {
		t.Error("route table: not one route per remoteSiteCidrs entry")
	}
	if dig(t, routes, "input", "properties", "nextHopType") != "VirtualAppliance" ||
		dig(t, routes, "input", "properties", "nextHopIpAddress") != "[parameters('loadBalancerFrontendIp')]" {
		t.Error("route table: next hop is not the load balancer frontend as a VirtualAppliance")
	}
	for _, o := range []string{"routeTableId", "publicIpPrefix", "loadBalancerFrontendIp"} {
		if tpl.Outputs[o] == nil {
			t.Errorf("no output %s", o)
		}
	}
}

// bicepDecl is what the test reads of a Bicep declaration.
type bicepDecl struct {
	typ, def string
	limits   map[string]string // minValue, maxValue, minLength, maxLength
	secure   bool
}

// parseBicep reads the top-level param, var, resource and output lines of
// a Bicep file, with the decorators above each param.
func parseBicep(t *testing.T, path string) (params map[string]bicepDecl, vars []string, resources, outputs map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	params, resources, outputs = map[string]bicepDecl{}, map[string]string{}, map[string]string{}
	paramRe := regexp.MustCompile(`^param (\w+) (\w+)(?: = (.+))?$`)
	decoRe := regexp.MustCompile(`^@(minValue|maxValue|minLength|maxLength)\((-?\d+)\)$`)
	varRe := regexp.MustCompile(`^var (\w+) = `)
	resRe := regexp.MustCompile(`^resource (\w+) '([^@']+)@([^']+)' = `)
	outRe := regexp.MustCompile(`^output (\w+) (\w+) = `)
	limits, secure := map[string]string{}, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case decoRe.MatchString(line):
			m := decoRe.FindStringSubmatch(line)
			limits[m[1]] = m[2]
		case line == "@secure()":
			secure = true
		case paramRe.MatchString(line):
			m := paramRe.FindStringSubmatch(line)
			params[m[1]] = bicepDecl{typ: m[2], def: m[3], limits: limits, secure: secure}
			limits, secure = map[string]string{}, false
		case varRe.MatchString(line):
			vars = append(vars, varRe.FindStringSubmatch(line)[1])
		case resRe.MatchString(line):
			m := resRe.FindStringSubmatch(line)
			resources[m[2]] = m[3]
		case outRe.MatchString(line):
			m := outRe.FindStringSubmatch(line)
			outputs[m[1]] = m[2]
		case strings.HasPrefix(line, "param ") || strings.HasPrefix(line, "resource ") || strings.HasPrefix(line, "output "):
			t.Fatalf("%s:%d: declaration this test cannot read: %q", path, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return params, vars, resources, outputs
}

// bicepDefault turns a Bicep default into the JSON template's defaultValue.
func bicepDefault(def string) any {
	switch {
	case def == "true" || def == "false":
		return def == "true"
	case strings.HasPrefix(def, "'") && strings.HasSuffix(def, "'"):
		return strings.ReplaceAll(def[1:len(def)-1], `\'`, "'")
	}
	if n, err := strconv.Atoi(def); err == nil {
		return float64(n)
	}
	return "[" + def + "]" // an expression, e.g. resourceGroup().location
}

func TestAzureBicepMatchesJSON(t *testing.T) {
	tpl, _ := loadTemplateFile(t, scaleSetPath)
	params, vars, resources, outputs := parseBicep(t, bicepPath)

	if got, want := sortedKeys(params), sortedKeys(tpl.Parameters); !slices.Equal(got, want) {
		t.Errorf("parameters: bicep %q, JSON %q", got, want)
	}
	for name, p := range params {
		jp, ok := tpl.Parameters[name].(map[string]any)
		if !ok {
			continue
		}
		typ := p.typ
		if p.secure {
			typ = "secure" + typ
		}
		if jp["type"] != typ {
			t.Errorf("parameter %s: bicep %s, JSON %v", name, typ, jp["type"])
		}
		if p.def != "" {
			if want := bicepDefault(p.def); fmt.Sprint(jp["defaultValue"]) != fmt.Sprint(want) {
				t.Errorf("parameter %s default: bicep %v, JSON %v", name, want, jp["defaultValue"])
			}
		} else if _, has := jp["defaultValue"]; has {
			t.Errorf("parameter %s: JSON has a default, bicep none", name)
		}
		for _, l := range []string{"minValue", "maxValue", "minLength", "maxLength"} {
			got, want := p.limits[l], ""
			if v, ok := jp[l]; ok {
				want = fmt.Sprint(v)
			}
			if got != want {
				t.Errorf("parameter %s %s: bicep %q, JSON %q", name, l, got, want)
			}
		}
	}

	slices.Sort(vars)
	if want := sortedKeys(tpl.Variables); !slices.Equal(vars, want) {
		t.Errorf("variables: bicep %q, JSON %q", vars, want)
	}

	jsonRes := map[string]string{}
	for _, r := range tpl.Resources {
		typ, _ := r["type"].(string)
		api, _ := r["apiVersion"].(string)
		if _, dup := jsonRes[typ]; dup {
			t.Errorf("JSON declares %s twice; this test compares by type", typ)
		}
		jsonRes[typ] = api
	}
	if !mapsEqual(resources, jsonRes) {
		t.Errorf("resources (type@apiVersion): bicep %v, JSON %v", resources, jsonRes)
	}

	jsonOut := map[string]string{}
	for name, o := range tpl.Outputs {
		jsonOut[name], _ = o.(map[string]any)["type"].(string)
	}
	if !mapsEqual(outputs, jsonOut) {
		t.Errorf("outputs: bicep %v, JSON %v", outputs, jsonOut)
	}
}

// The compiled JSON is formatted as committed: valid, and a re-encode
// keeps every key (no duplicate keys silently dropped by the decoder).
func TestAzureJSONNoDuplicateKeys(t *testing.T) {
	for _, path := range []string{azurePath, scaleSetPath} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		if err := checkDuplicates(dec); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// checkDuplicates walks one JSON value token by token and fails on an
// object that repeats a key.
func checkDuplicates(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key := k.(string)
			if seen[key] {
				return fmt.Errorf("duplicate key %q", key)
			}
			seen[key] = true
			if err := checkDuplicates(dec); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for dec.More() {
			if err := checkDuplicates(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
