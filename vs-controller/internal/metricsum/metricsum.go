// Package metricsum reads vs-controller's Prometheus metrics back in tests
// and benchmarks: the sum of a counter's or gauge's samples that carry the
// given label values.
package metricsum

import "github.com/prometheus/client_golang/prometheus"

// Sum adds the values of the samples of metric name whose labels include
// every key/value of labels (nil: all samples).
func Sum(g prometheus.Gatherer, name string, labels map[string]string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metric
				}
			}
			if m.Counter != nil {
				total += m.GetCounter().GetValue()
			} else {
				total += m.GetGauge().GetValue()
			}
		}
	}
	return total, nil
}
