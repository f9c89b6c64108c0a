package trust

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options configure the CA rotation (docs/certificates.md).
type Options struct {
	// CASecret is the runtime CA's Secret; the rotation is off when empty.
	CASecret types.NamespacedName
	// GatewayCASecret is the gateway CA's Secret; empty: the SKR Secret's
	// ca.crt is the runtime certificate's ca.crt (the gateway's server
	// certificate is signed by the runtime CA).
	GatewayCASecret types.NamespacedName
	// GatewayClientCASecret receives the runtime CA bundle (Istio's
	// <credentialName>-cacert); none written when empty.
	GatewayClientCASecret types.NamespacedName
	// GatewayCertificate is the gateway's server Certificate, renewed once
	// every runtime trusts a new gateway CA; none when empty.
	GatewayCertificate types.NamespacedName
	// Store names the ConfigMaps (in the Kyma namespace) remembering the
	// CAs seen: <Store>-runtime and <Store>-gateway; and the Secret
	// <Store>-seal, in GatewayClientCASecret's namespace, holding the key
	// of their seals (Seal).
	Store string
	// RenewalsPerSecond limits runtime certificate renewal requests; 5 when 0.
	RenewalsPerSecond float64
	// Interval between refreshes of the CA Secrets; 5s when 0.
	Interval time.Duration
	// Settle: see Keeper.
	Settle time.Duration
	// MigrationExtraCASecret opens the trust window of a migration from
	// Lifecycle Manager: the CAs in this Secret's ca.crt are added to the
	// bundle written to GatewayClientCASecret (never to the SKRs' bundles),
	// re-read every Interval; closed when empty. Needs CASecret and
	// GatewayClientCASecret.
	MigrationExtraCASecret types.NamespacedName
}

// DefaultStore is the default Store.
const DefaultStore = "runtime-watcher-trust"

// DefaultSettle is the default Settle (--ca-settle): a kubelet updates a
// mounted Secret within its sync period (1 min) plus its cache's TTL (1
// min by default), and Istio's SDS and the webhook's reload take seconds.
const DefaultSettle = 2 * time.Minute

// ClientCAConfigMapSuffix ends the name of the ConfigMap, in the Kyma
// namespace, that holds the gateway's client CA bundle for ext-authz's
// --ca-file: <Store>-client-ca (manifests/kcp/base/ext-authz.yaml).
const ClientCAConfigMapSuffix = "-client-ca"

// clientCAConfigMap is where the client CA bundle is mirrored for
// ext-authz: none without a client CA Secret.
func (o Options) clientCAConfigMap(kymaNamespace string) types.NamespacedName {
	if o.GatewayClientCASecret.Name == "" {
		return types.NamespacedName{}
	}
	return types.NamespacedName{Namespace: kymaNamespace, Name: o.Store + ClientCAConfigMapSuffix}
}

// ParseObjectKey reads "namespace/name", or "name" in namespace def; empty
// gives the zero key.
func ParseObjectKey(s, def string) (types.NamespacedName, error) {
	if s == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, found := strings.Cut(s, "/")
	if !found {
		ns, name = def, s
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%q: want namespace/name or name", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// Keeper builds the trust keeper of mgr's runtime reconciler, whose Kymas
// live in kymaNamespace; nil when the rotation is off.
func (o Options) Keeper(mgr ctrl.Manager, kymaNamespace string) (*Keeper, error) {
	if o.MigrationExtraCASecret.Name != "" && (o.CASecret.Name == "" || o.GatewayClientCASecret.Name == "") {
		return nil, errors.New("the migration trust window (extra CA Secret) needs the CA rotation and the gateway client CA Secret: vs-controller writes no client CA bundle without them")
	}
	if o.CASecret.Name == "" {
		return nil, nil
	}
	if o.Store == "" {
		o.Store = DefaultStore
	}
	// CA Secrets, the trust stores and the gateway's Secrets are a handful
	// of objects outside the cache: read them directly. This client is
	// uncached like mgr.GetAPIReader(): it sees Secrets without
	// contract.LabelPartOf too, which the manager's cached client does not
	// (package vsmanager) — a CA Secret somebody else created (e.g.
	// Lifecycle Manager's) is read this way, never through mgr.GetClient().
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, err
	}
	log := ctrl.Log.WithName("trust")
	rec := mgr.GetEventRecorder("vs-controller")
	// The seal key lives beside the gateway's client CA Secret, where
	// vs-controller may create Secrets (it may not in the Kyma namespace):
	// whoever reads Secrets there holds the gateway's key already. Without
	// a client CA Secret the stores are not sealed: a restart remembers
	// nothing.
	var seal *Seal
	if o.GatewayClientCASecret.Name != "" {
		seal = &Seal{Client: c, Secret: types.NamespacedName{Namespace: o.GatewayClientCASecret.Namespace, Name: o.Store + "-seal"}}
	} else {
		log.Info("no gateway client CA Secret: the trust stores are not sealed, a restart remembers no CA that left the CA Secret")
	}
	k := &Keeper{
		Runtime: &Anchor{Name: "runtime", Client: c, Secret: o.CASecret, Recorder: rec, Log: log, Seal: seal,
			Store: types.NamespacedName{Namespace: kymaNamespace, Name: o.Store + "-runtime"}},
		Client:             c,
		ClientCASecret:     o.GatewayClientCASecret,
		ClientCAConfigMap:  o.clientCAConfigMap(kymaNamespace),
		GatewayCertificate: o.GatewayCertificate,
		Interval:           o.Interval,
		Settle:             o.Settle,
		Log:                log,
		Recorder:           rec,
	}
	if o.RenewalsPerSecond > 0 {
		k.Renewals = rate.NewLimiter(rate.Limit(o.RenewalsPerSecond), 1)
	}
	if o.MigrationExtraCASecret.Name != "" {
		// Read uncached: the Secret cache holds vs-controller's own
		// Secrets only.
		k.MigrationCA = &MigrationCA{Client: c, Secret: o.MigrationExtraCASecret, Recorder: rec, Log: log.WithName("migration")}
		log.Info("migration trust window open: the CAs of this Secret are trusted for client certificates at the gateway", "secret", o.MigrationExtraCASecret.String())
	}
	if o.GatewayCASecret.Name != "" {
		k.Gateway = &Anchor{Name: "gateway", Client: c, Secret: o.GatewayCASecret, Recorder: rec, Log: log, Seal: seal,
			Store: types.NamespacedName{Namespace: kymaNamespace, Name: o.Store + "-gateway"}}
	}
	return k, nil
}
