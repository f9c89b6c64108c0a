package promtext_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

func TestSum(t *testing.T) {
	pod := `# HELP m_total reviews
# TYPE m_total counter
m_total{manager="a",operation="UPDATE",result="emitted"} 3
m_total{manager="a",operation="CREATE",result="emitted"} 2
m_total{manager="b",operation="UPDATE",result="emitted"} 7
m_other 1
`
	text := pod + pod // two pods, as WebhookMetrics joins them
	if v, ok := promtext.Sum(text, "m_total", map[string]string{"manager": "a", "operation": "UPDATE"}); !ok || v != 6 {
		t.Errorf("manager a, UPDATE: %v %v, want 6 true", v, ok)
	}
	if v, ok := promtext.Sum(text, "m_total", nil); !ok || v != 24 {
		t.Errorf("all: %v %v, want 24 true", v, ok)
	}
	if _, ok := promtext.Sum(text, "m_total", map[string]string{"manager": "c"}); ok {
		t.Error("manager c: found, want none")
	}
	if v, ok := promtext.Sum(text, "m_other", nil); !ok || v != 2 {
		t.Errorf("m_other: %v %v, want 2 true", v, ok)
	}
}

func TestGatheredAndCollected(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"a", "b"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	reg.MustRegister(c, g)
	c.WithLabelValues("x", "1").Add(2)
	c.WithLabelValues("y", "2").Add(5)
	g.Set(7)

	got, err := promtext.Gathered(reg, "c_total", "a", "b")
	if err != nil || len(got) != 2 || got["x/1"] != 2 || got["y/2"] != 5 {
		t.Errorf("c_total by a/b: %v %v", got, err)
	}
	if got, err := promtext.Gathered(reg, "g"); err != nil || len(got) != 1 || got[""] != 7 {
		t.Errorf("g: %v %v", got, err)
	}
	if got, err := promtext.Gathered(reg, "missing"); err != nil || len(got) != 0 {
		t.Errorf("missing: %v %v", got, err)
	}
	if got, err := promtext.Collected(c, "b"); err != nil || len(got) != 2 || got["1"] != 2 || got["2"] != 5 {
		t.Errorf("collected c by b: %v %v", got, err)
	}
	empty := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "e", Help: "e"}, []string{"a"})
	if got, err := promtext.Collected(empty, "a"); err != nil || len(got) != 0 {
		t.Errorf("an empty vector: %v %v", got, err)
	}
}
