package listener_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/listener"
)

func TestTimeoutOptions(t *testing.T) {
	defaults := [5]time.Duration{listener.DefaultReadHeaderTimeout, listener.DefaultReadTimeout,
		listener.DefaultWriteTimeout, listener.DefaultIdleTimeout, listener.DefaultShutdownTimeout}
	for _, tc := range []struct {
		name    string
		opts    []listener.Option
		want    [5]time.Duration
		wantErr bool
	}{
		{name: "defaults", want: defaults},
		{name: "all set", opts: []listener.Option{listener.WithTimeouts(1*time.Second, 2*time.Second, 3*time.Second, 4*time.Second), listener.WithShutdownTimeout(5 * time.Second)},
			want: [5]time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second}},
		{name: "zero keeps the default", opts: []listener.Option{listener.WithTimeouts(0, 7*time.Second, 0, 0)},
			want: [5]time.Duration{defaults[0], 7 * time.Second, defaults[2], defaults[3], defaults[4]}},
		{name: "negative timeout", opts: []listener.Option{listener.WithTimeouts(0, 0, -time.Second, 0)}, wantErr: true},
		{name: "zero shutdown timeout", opts: []listener.Option{listener.WithShutdownTimeout(0)}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]listener.Option{listener.WithRegisterer(prometheus.NewRegistry())}, tc.opts...)
			l, err := listener.New("127.0.0.1:0", "manager-a", opts...)
			if tc.wantErr {
				if err == nil {
					t.Fatal("New accepted the options")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Timeouts(); got != tc.want {
				t.Errorf("timeouts %v, want %v", got, tc.want)
			}
		})
	}
}
