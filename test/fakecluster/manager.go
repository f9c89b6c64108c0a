package fakecluster

import (
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Managers builds controller-runtime managers over Cluster, for tests of a
// binary's manager assembly: New has ctrl.NewManager's signature and gives
// the manager the cluster's client and REST mapper, controller-runtime's
// informertest cache (synced as Synced says) and no listeners, and keeps
// the options it was given.
type Managers struct {
	Cluster *Cluster
	// Synced is what the cache's WaitForCacheSync answers.
	Synced bool
	// Options and Cache are what the last New got.
	Options manager.Options
	Cache   cache.Options
}

// New is ctrl.NewManager over the fake cluster.
func (m *Managers) New(cfg *rest.Config, o manager.Options) (manager.Manager, error) {
	m.Options = o
	o.Metrics.BindAddress, o.HealthProbeBindAddress, o.PprofBindAddress = "0", "0", "0"
	o.MapperProvider = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return m.Cluster.RESTMapper(), nil }
	o.NewClient = func(*rest.Config, client.Options) (client.Client, error) { return m.Cluster, nil }
	o.NewCache = func(_ *rest.Config, co cache.Options) (cache.Cache, error) {
		m.Cache = co
		return &informertest.FakeInformers{Scheme: co.Scheme, Synced: &m.Synced}, nil
	}
	return ctrl.NewManager(cfg, o)
}
