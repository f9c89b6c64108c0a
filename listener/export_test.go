package listener

import "time"

// WithClock sets the clock of the last-seen record (tests only).
func WithClock(now func() time.Time) Option {
	return func(c *config) error { c.now = now; return nil }
}

// Timeouts are the HTTP server's read-header, read, write and idle
// timeouts and the shutdown timeout, as the options left them.
func (l *Listener) Timeouts() [5]time.Duration {
	return [5]time.Duration{l.cfg.readHeaderTO, l.cfg.readTO, l.cfg.writeTO, l.cfg.idleTO, l.cfg.shutdownTO}
}
