package delivery

import (
	"bytes"
	"context"
	"os"
	"time"
)

// WatchCA re-reads the client's CA file every interval until ctx ends and
// reloads the client when its content changed, so a change of ca.crt alone
// (a CA rotation: same key pair, new trust bundle) is picked up without a
// restart. The key pair's own watcher reloads on key pair changes; Reload
// is idempotent, so both may fire. In-flight requests keep the transport
// they started on (Reload swaps the client, it does not close busy
// connections). A file that cannot be read or holds no certificate keeps
// the CA in use, logged.
func (c *Client) WatchCA(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := os.ReadFile(c.cfg.CAFile)
		if err != nil {
			c.log.Error(err, "CA file unreadable; keeping the CA in use", "file", c.cfg.CAFile)
			continue
		}
		c.mu.Lock()
		same := bytes.Equal(data, c.caPEM)
		c.mu.Unlock()
		if same {
			continue
		}
		if err := c.Reload(); err != nil {
			c.log.Error(err, "CA file changed but is unusable; keeping the CA in use", "file", c.cfg.CAFile)
		}
	}
}
