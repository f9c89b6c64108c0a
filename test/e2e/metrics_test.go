package e2e_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricSum sums the samples of the metric name whose labels include all of
// want, in Prometheus text: one exposition, or several one after another
// (Environment.WebhookMetrics joins those of every webhook pod). found is
// false when no sample matched.
func metricSum(text, name string, want map[string]string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		// One sample line is a whole exposition of an untyped metric.
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(line + "\n"))
		if err != nil {
			continue
		}
		for _, m := range families[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range want {
				match = match && labels[k] == v
			}
			if match {
				sum, found = sum+m.GetUntyped().GetValue(), true
			}
		}
	}
	return sum, found
}

// fetchMetrics reads the Prometheus text at url ("" when it cannot).
func fetchMetrics(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return ""
	}
	return string(b)
}

func TestMetricSum(t *testing.T) {
	pod := `# HELP m_total reviews
# TYPE m_total counter
m_total{manager="a",operation="UPDATE",result="emitted"} 3
m_total{manager="a",operation="CREATE",result="emitted"} 2
m_total{manager="b",operation="UPDATE",result="emitted"} 7
m_other 1
`
	text := pod + pod // two pods, as WebhookMetrics joins them
	if v, ok := metricSum(text, "m_total", map[string]string{"manager": "a", "operation": "UPDATE"}); !ok || v != 6 {
		t.Errorf("manager a, UPDATE: %v %v, want 6 true", v, ok)
	}
	if v, ok := metricSum(text, "m_total", nil); !ok || v != 24 {
		t.Errorf("all: %v %v, want 24 true", v, ok)
	}
	if _, ok := metricSum(text, "m_total", map[string]string{"manager": "c"}); ok {
		t.Error("manager c: found, want none")
	}
	if v, ok := metricSum(text, "m_other", nil); !ok || v != 2 {
		t.Errorf("m_other: %v %v, want 2 true", v, ok)
	}
}
