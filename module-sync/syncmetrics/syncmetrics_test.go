package syncmetrics_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmetrics"
)

// TestCountRequests: every request through a wrapped transport is counted
// and timed by method and still reaches the server.
func TestCountRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer srv.Close()
	c := &http.Client{Transport: syncmetrics.CountRequests(http.DefaultTransport)}
	timed := func(method string) uint64 {
		m := &dto.Metric{}
		if err := syncmetrics.SKRRequestDuration.WithLabelValues(method).(prometheus.Metric).Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	timedGets, timedPuts := timed("GET"), timed("PUT")
	gets, puts := testutil.ToFloat64(syncmetrics.SKRRequests.WithLabelValues("GET")), testutil.ToFloat64(syncmetrics.SKRRequests.WithLabelValues("PUT"))
	for _, method := range []string{http.MethodGet, http.MethodGet, http.MethodPut} {
		req, err := http.NewRequest(method, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot {
			t.Errorf("%s: status %d, want the server's", method, resp.StatusCode)
		}
	}
	if g, p := testutil.ToFloat64(syncmetrics.SKRRequests.WithLabelValues("GET"))-gets, testutil.ToFloat64(syncmetrics.SKRRequests.WithLabelValues("PUT"))-puts; g != 2 || p != 1 {
		t.Errorf("counted %v GET and %v PUT, want 2 and 1", g, p)
	}
	if g, p := timed("GET")-timedGets, timed("PUT")-timedPuts; g != 2 || p != 1 {
		t.Errorf("timed %v GET and %v PUT, want 2 and 1", g, p)
	}
}
