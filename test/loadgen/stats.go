package loadgen

import (
	"slices"
	"time"
)

// Percentile of sorted latencies, nearest rank (p in [0, 1]; 1 is the
// maximum); 0 for none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Summary of a run's latencies.
type Summary struct {
	N             int
	RPS           float64 // requests per second of wall clock (0 without one)
	P50, P99, Max time.Duration
}

// Summarize sorts lat in place and summarizes it; wall is the time the
// requests took (0: no RPS).
func Summarize(lat []time.Duration, wall time.Duration) Summary {
	slices.Sort(lat)
	s := Summary{N: len(lat), P50: Percentile(lat, 0.50), P99: Percentile(lat, 0.99), Max: Percentile(lat, 1)}
	if wall > 0 {
		s.RPS = float64(len(lat)) / wall.Seconds()
	}
	return s
}

// Micros is d in microseconds, for tables and benchmark metrics.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Millis is d in milliseconds, for tables and benchmark metrics.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Median of v (0 for none); v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
