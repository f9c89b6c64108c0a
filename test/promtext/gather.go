package promtext

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Gathered returns the samples of the metric name that g gathers, keyed by
// the values of the given labels joined with "/" ("" for none): the value
// of a counter, gauge or untyped sample.
func Gathered(g prometheus.Gatherer, name string, labels ...string) (map[string]float64, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[key(m, labels)] = value(m)
		}
	}
	return out, nil
}

// Collected is Gathered for the one metric a collector (a *CounterVec, a
// *GaugeVec, …) exports, read through a registry of its own.
func Collected(c prometheus.Collector, labels ...string) (map[string]float64, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	families, err := reg.Gather()
	if err != nil || len(families) == 0 {
		return map[string]float64{}, err
	}
	return Gathered(reg, families[0].GetName(), labels...)
}

func key(m *dto.Metric, labels []string) string {
	byName := map[string]string{}
	for _, l := range m.GetLabel() {
		byName[l.GetName()] = l.GetValue()
	}
	values := make([]string, len(labels))
	for i, l := range labels {
		values[i] = byName[l]
	}
	return strings.Join(values, "/")
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}
