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
// ("<agent> shard/<identity>"): the API servers' audit record names the
// replica of each write (the field manager, the user agent's first word,
// stays the component's).
func WithUserAgent(cfg *rest.Config, identity string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	ua := cfg.UserAgent
	switch {
	case ua == "":
		ua = rest.DefaultKubernetesUserAgent()
	case !strings.Contains(ua, "/"):
		ua += "/" + version.Get()
	}
	cfg.UserAgent = ua + " shard/" + identity
	return cfg
}
