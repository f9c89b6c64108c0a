package decisionlog_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/decisionlog"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// lines collects the JSON lines a logr.Logger writes.
type lines struct{ got []map[string]any }

func (c *lines) logger(t *testing.T) logr.Logger {
	return funcr.NewJSON(func(obj string) {
		m := map[string]any{}
		if err := json.Unmarshal([]byte(obj), &m); err != nil {
			t.Errorf("log line %q is not JSON: %v", obj, err)
		}
		c.got = append(c.got, m)
	}, funcr.Options{})
}

func newLog(t *testing.T, o decisionlog.Options) (*decisionlog.Log, *lines, *prometheus.Registry) {
	t.Helper()
	c := &lines{}
	reg := prometheus.NewPedanticRegistry()
	l, err := decisionlog.New(o, c.logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	return l, c, reg
}

func TestWriteFields(t *testing.T) {
	l, c, _ := newLog(t, decisionlog.Options{AllowSampleRate: 0, MaxLinesPerSecond: 10})
	fp := [32]byte{0xab, 0xcd}
	l.Write(&decisionlog.Entry{Mode: "dry-run", Result: "deny", Reason: "san-mismatch", Runtime: "runtime-1", Fingerprint: fp,
		Path: "/v1/lifecycle-manager/event", RequestID: "r1", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Message: "no SAN", Duration: 1500 * time.Microsecond})
	l.Write(&decisionlog.Entry{Mode: "enforce", Result: "unavailable", Reason: "not-ready", Path: "/p", Err: errors.New("cache broken")})
	if len(c.got) != 2 {
		t.Fatalf("%d lines, want 2: %v", len(c.got), c.got)
	}
	want := map[string]any{"msg": "Check decision", "mode": "dry-run", "result": "deny", "reason": "san-mismatch", "runtime": "runtime-1",
		"certSHA256": "abcd" + strings.Repeat("0", 60), "path": "/v1/lifecycle-manager/event", "durationSeconds": 0.0015,
		"requestID": "r1", "traceID": "4bf92f3577b34da6a3ce929d0e0e4736", "message": "no SAN"}
	for k, v := range want {
		if c.got[0][k] != v {
			t.Errorf("field %s = %v, want %v (line %v)", k, c.got[0][k], v, c.got[0])
		}
	}
	if c.got[1]["error"] != "cache broken" || c.got[1]["certSHA256"] != nil || c.got[1]["runtime"] != nil {
		t.Errorf("failed lookup line %v: want the error, no certificate and no runtime", c.got[1])
	}
}

func TestSampleAllow(t *testing.T) {
	for _, tt := range []struct {
		rate            float64
		atLeast, atMost int // of 10,000
	}{
		{rate: 0, atLeast: 0, atMost: 0},
		{rate: 1, atLeast: 10_000, atMost: 10_000},
		// Binomial(10000, 0.5): mean 5000, sd 50; ±500 is 10 sd.
		{rate: 0.5, atLeast: 4_500, atMost: 5_500},
	} {
		l, _, _ := newLog(t, decisionlog.Options{AllowSampleRate: tt.rate, MaxLinesPerSecond: 1})
		n := 0
		for range 10_000 {
			if l.SampleAllow() {
				n++
			}
		}
		if n < tt.atLeast || n > tt.atMost {
			t.Errorf("rate %v: %d of 10000 sampled, want %d to %d", tt.rate, n, tt.atLeast, tt.atMost)
		}
	}
	var off *decisionlog.Log
	if off.SampleAllow() || off.Enabled() {
		t.Error("a nil Log samples")
	}
	off.Write(&decisionlog.Entry{}) // no panic
}

func TestRateBound(t *testing.T) {
	l, c, reg := newLog(t, decisionlog.Options{AllowSampleRate: 1, MaxLinesPerSecond: 5})
	now := time.Unix(1_700_000_000, 0)
	l.SetClock(func() time.Time { return now })
	for range 1000 { // a flood within one instant: the burst of 5 only
		l.Write(&decisionlog.Entry{Mode: "enforce", Result: "deny", Reason: "unknown-runtime"})
	}
	now = now.Add(time.Second) // five more tokens
	for range 1000 {
		l.Write(&decisionlog.Entry{Mode: "enforce", Result: "allow"})
	}
	if len(c.got) != 10 {
		t.Fatalf("%d lines, want 10", len(c.got))
	}
	dropped, err := promtext.Gathered(reg, "runtime_watcher_ext_authz_decision_log_dropped_total")
	if err != nil || dropped[""] != 1990 {
		t.Errorf("dropped %v (%v), want 1990", dropped, err)
	}
	written, err := promtext.Gathered(reg, "runtime_watcher_ext_authz_decision_log_lines_total", "result")
	if err != nil || written["deny"] != 5 || written["allow"] != 5 {
		t.Errorf("lines %v (%v), want 5 deny and 5 allow", written, err)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []decisionlog.Options{{AllowSampleRate: -0.1}, {AllowSampleRate: 1.1}, {MaxLinesPerSecond: -1}, {MaxLinesPerSecond: 100_001}} {
		if _, err := decisionlog.New(o, logr.Discard(), prometheus.NewRegistry()); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	l, err := decisionlog.New(decisionlog.Options{AllowSampleRate: 1}, logr.Discard(), prometheus.NewRegistry())
	if err != nil || l != nil {
		t.Errorf("MaxLinesPerSecond 0: %v, %v; want no log", l, err)
	}
}

// TestWriteBoundsFields: a path as long as the gateway's header limit (and
// the other fields a client chooses) reaches the log cut to 1 KiB with a
// marker (issue 33: the path was written whole).
func TestWriteBoundsFields(t *testing.T) {
	l, c, _ := newLog(t, decisionlog.Options{MaxLinesPerSecond: 10})
	long := "/v2/m/event/" + strings.Repeat("é", 30_000)
	l.Write(&decisionlog.Entry{Mode: "enforce", Result: "deny", Reason: "r", Runtime: long, Path: long, RequestID: long, TraceID: long, Message: long})
	if len(c.got) != 1 {
		t.Fatalf("%d lines", len(c.got))
	}
	for _, k := range []string{"path", "runtime", "requestID", "traceID", "message"} {
		v, _ := c.got[0][k].(string)
		if len(v) > 1024 || !strings.HasSuffix(v, "…(cut)") || !strings.HasPrefix(v, long[:100]) {
			t.Errorf("field %s: %d bytes, ends %q", k, len(v), v[max(0, len(v)-20):])
		}
	}
}
