package contract

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseHealthReport(t *testing.T) {
	good := []string{
		`{}`,
		`{"managers":[]}`,
		`{"managers":[{"name":"lifecycle-manager","result":"404","failingSeconds":61}]}`,
		`{"managers":[{"name":"a","result":"transport","failingSeconds":0},{"name":"b","result":"5xx","failingSeconds":3}]}`,
	}
	for _, s := range good {
		if _, err := ParseHealthReport([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := []string{
		``, `[]`, `{"managers":{}}`, `{"x":1}`, `{} {}`,
		`{"managers":[{"name":"A_B","result":"404","failingSeconds":1}]}`,
		`{"managers":[{"name":"a","result":"2xx","failingSeconds":1}]}`,
		`{"managers":[{"name":"a","result":"999","failingSeconds":1}]}`,
		`{"managers":[{"name":"a","result":"404","failingSeconds":-1}]}`,
		`{"managers":[{"name":"a","result":"404","failingSeconds":99999999999}]}`,
		`{"managers":[{"name":"a","result":"404","failingSeconds":1},{"name":"a","result":"5xx","failingSeconds":1}]}`,
		`{"managers":[{"name":"a","result":"404","failingSeconds":1,"extra":true}]}`,
		`{"managers":[` + strings.Repeat(`{"name":"a","result":"404","failingSeconds":1},`, 400) + `{}]}`,
	}
	for _, s := range bad {
		if _, err := ParseHealthReport([]byte(s)); err == nil {
			t.Errorf("%.80s: accepted", s)
		}
	}
	var many HealthReport
	for i := range MaxHealthManagers + 1 {
		many.Managers = append(many.Managers, ManagerDelivery{Name: "m" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Result: "5xx"})
	}
	b, _ := json.Marshal(many)
	if _, err := ParseHealthReport(b); err == nil {
		t.Errorf("%d managers accepted", len(many.Managers))
	}
	many.Managers = many.Managers[:MaxHealthManagers]
	b, _ = json.Marshal(many)
	if _, err := ParseHealthReport(b); err != nil {
		t.Errorf("%d managers refused: %v", len(many.Managers), err)
	}
}

// FuzzParseHealthReport: any input is accepted only within the bounds, and
// what is accepted encodes and parses again to the same report.
func FuzzParseHealthReport(f *testing.F) {
	f.Add([]byte(`{"managers":[{"name":"a","result":"404","failingSeconds":61}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"managers":[{"name":"a","result":"transport","failingSeconds":0},{"name":"b","result":"5xx","failingSeconds":3}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseHealthReport(b)
		if err != nil {
			return
		}
		if len(b) > MaxHealthReportBytes || len(r.Managers) > MaxHealthManagers {
			t.Fatalf("accepted beyond the bounds: %d bytes, %d managers", len(b), len(r.Managers))
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ParseHealthReport(again)
		if err != nil {
			t.Fatalf("re-encoded report refused: %v", err)
		}
		if len(r2.Managers) != len(r.Managers) {
			t.Fatal("re-encoded report differs")
		}
	})
}
