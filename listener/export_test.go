package listener

import "time"

// WithClock sets the clock of the last-seen record (tests only).
func WithClock(now func() time.Time) Option {
	return func(c *config) error { c.now = now; return nil }
}
