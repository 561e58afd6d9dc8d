package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Dashboard is bridgehead.json.
//
//go:embed bridgehead.json
var Dashboard []byte

var metricName = regexp.MustCompile(`bridgehead_[a-z_]+`)

// Queries returns every PromQL string of a dashboard: panel target exprs
// (rows may nest panels) and templating queries.
func Queries(dashboard []byte) ([]string, error) {
	var dash map[string]any
	if err := json.Unmarshal(dashboard, &dash); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var out []string
	var panel func(p map[string]any)
	panel = func(p map[string]any) {
		targets, _ := p["targets"].([]any)
		for _, tg := range targets {
			if t, ok := tg.(map[string]any); ok {
				if e, ok := t["expr"].(string); ok {
					out = append(out, e)
				}
			}
		}
		sub, _ := p["panels"].([]any)
		for _, s := range sub {
			if sp, ok := s.(map[string]any); ok {
				panel(sp)
			}
		}
	}
	panel(dash)
	tmpl, _ := dash["templating"].(map[string]any)
	vars, _ := tmpl["list"].([]any)
	for _, v := range vars {
		vm, _ := v.(map[string]any)
		switch q := vm["query"].(type) {
		case string:
			out = append(out, q)
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// UsedMetrics returns the bridgehead_* series names a dashboard's queries
// name, sorted and each once (a histogram's _bucket, _sum and _count
// series as written).
func UsedMetrics(dashboard []byte) ([]string, error) {
	qs, err := Queries(dashboard)
	if err != nil {
		return nil, err
	}
	var used []string
	for _, q := range qs {
		used = append(used, metricName.FindAllString(q, -1)...)
	}
	slices.Sort(used)
	return slices.Compact(used), nil
}

// Missing returns the names in used that no family in exported (family
// name to Prometheus type: "counter", "gauge", "histogram", ...)
// provides. A histogram or summary family provides its _bucket, _sum and
// _count series.
func Missing(used []string, exported map[string]string) []string {
	var missing []string
	for _, m := range used {
		if _, ok := exported[m]; ok {
			continue
		}
		found := false
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, ok := strings.CutSuffix(m, suffix)
			if !ok {
				continue
			}
			if t := exported[base]; t == "histogram" || (t == "summary" && suffix != "_bucket") {
				found = true
			}
		}
		if !found {
			missing = append(missing, m)
		}
	}
	return missing
}
