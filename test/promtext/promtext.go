// Package promtext reads samples from Prometheus text exposition, as the
// test environments scrape it from the processes they run: one /metrics
// page, or the pages of several pods one after another; and, with Gathered
// and Collected, the samples of a registry or collector in the test's own
// process, keyed by the label values a test asks for.
package promtext

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sum sums the samples of the metric name whose labels include all of want.
// found is false when no sample matched.
func Sum(text, name string, want map[string]string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		// One sample line is a whole exposition of an untyped metric, so
		// pages joined together (each with its own TYPE lines) parse too.
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

// Fetch reads the page at url (at most 16 MiB).
func Fetch(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(b), err
}
