package decisionlog

import "time"

// SetClock makes the lines-per-second bound read now instead of the clock.
func (l *Log) SetClock(now func() time.Time) { l.now = now }
