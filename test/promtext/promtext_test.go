package promtext_test

import (
	"testing"

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
