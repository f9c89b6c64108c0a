package shards

import (
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/seed-c8be168e/runtime-watcher/version"
)

// ForConfig is the member identity of group in namespace, over the KCP at
// cfg, with Leases of leaseDuration (DefaultLeaseDuration when 0; the renew
// deadline is 2/3 of it, the retry period 2/15) — how module-sync and
// vs-controller make their replicas members (--shard-identity,
// --shard-lease-duration).
func ForConfig(cfg *rest.Config, namespace, group, identity string, leaseDuration time.Duration, log logr.Logger) (*Shards, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	d := leaseDuration
	if d <= 0 {
		d = DefaultLeaseDuration
	}
	return New(Options{
		Leases: cs.CoordinationV1(), Namespace: namespace, Group: group, Identity: identity,
		LeaseDuration: d, RenewDeadline: d * 2 / 3, RetryPeriod: d * 2 / 15,
		Log: log,
	})
}

// WithUserAgent is cfg whose user agent names the member identity
// (UserAgent): the API servers' audit record names the replica of each
// write.
func WithUserAgent(cfg *rest.Config, identity string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = UserAgent(cfg.UserAgent, identity)
	return cfg
}

// UserAgent is ua naming the member identity ("<agent> shard/<identity>";
// client-go's default agent when ua is empty): the KCP's and the SKRs'
// audit records name the replica of each write (test/shardaudit), while the
// field manager, the user agent up to its first "/", stays the component's
// (a version is added to an agent without one).
func UserAgent(ua, identity string) string {
	switch {
	case ua == "":
		ua = rest.DefaultKubernetesUserAgent()
	case !strings.Contains(ua, "/"):
		ua += "/" + version.Get()
	}
	return ua + " shard/" + identity
}
