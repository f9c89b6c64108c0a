package e2e_test

import (
	"context"

	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// fetchMetrics reads the Prometheus text at url ("" when it cannot).
func fetchMetrics(ctx context.Context, url string) string {
	text, _ := promtext.Fetch(ctx, url)
	return text
}
