// Package promtext reads the metrics page of a bridgehead gateway (the
// Prometheus text exposition format) into a flat list of samples, for the
// flood benchmark's counter deltas.
//
// Parsing is github.com/prometheus/common/expfmt's TextParser, the parser
// of the Prometheus server and client_golang's own tests: escapes, label
// sets, exponents, +Inf/NaN, timestamps, summaries and histograms are read
// as Prometheus reads them. This package only flattens its metric families
// back into one sample per exposition line.
package promtext

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one line of the exposition: a metric name, its labels and its
// value. A histogram gives NAME_bucket{le=...}, NAME_sum and NAME_count
// samples, a summary NAME{quantile=...}, NAME_sum and NAME_count, as in
// the text; le and quantile are written as strconv formats floats
// ("0.005", "+Inf").
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Parse reads a metrics page. Samples come sorted by family name, in the
// order of the page within a family. Timestamps are ignored.
func Parse(b []byte) ([]Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	var out []Sample
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		fam := fams[name]
		for _, m := range fam.GetMetric() {
			labels := func(extra ...string) map[string]string {
				l := make(map[string]string, len(m.GetLabel())+1)
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				for i := 0; i+1 < len(extra); i += 2 {
					l[extra[i]] = extra[i+1]
				}
				return l
			}
			switch fam.GetType() {
			case dto.MetricType_COUNTER:
				out = append(out, Sample{name, labels(), m.GetCounter().GetValue()})
			case dto.MetricType_GAUGE:
				out = append(out, Sample{name, labels(), m.GetGauge().GetValue()})
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					out = append(out, Sample{name, labels(model.QuantileLabel, formatFloat(q.GetQuantile())), q.GetValue()})
				}
				out = append(out,
					Sample{name + "_sum", labels(), s.GetSampleSum()},
					Sample{name + "_count", labels(), float64(s.GetSampleCount())})
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, bk := range h.GetBucket() {
					out = append(out, Sample{name + "_bucket", labels(model.BucketLabel, formatFloat(bk.GetUpperBound())), float64(bk.GetCumulativeCount())})
				}
				out = append(out,
					Sample{name + "_sum", labels(), h.GetSampleSum()},
					Sample{name + "_count", labels(), float64(h.GetSampleCount())})
			default: // untyped
				out = append(out, Sample{name, labels(), m.GetUntyped().GetValue()})
			}
		}
	}
	return out, nil
}

func formatFloat(x float64) string {
	if math.IsInf(x, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

// Value is the value of the sample with name and exactly labels (nil:
// none), 0 when there is none.
func Value(ss []Sample, name string, labels map[string]string) float64 {
	for _, s := range ss {
		if s.Name == name && maps.Equal(s.Labels, labels) {
			return s.Value
		}
	}
	return 0
}
