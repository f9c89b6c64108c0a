package trust

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// ExpiringSoon is how close to its not-after a runtime certificate is
// reported (log, Event, runtime_watcher_vs_controller_runtimes_certificate_expiring_soon).
const ExpiringSoon = 7 * 24 * time.Hour

// Keeper keeps the runtime CA and gateway CA trust bundles
// (docs/certificates.md): it refreshes both anchors (every Interval and when
// poked), writes the runtime CA bundle into the gateway's client-CA Secret,
// then publishes the bundles to the runtime reconciler and re-reconciles
// every runtime when one changed (Changed). It requests the renewal of the
// gateway's server certificate once every runtime holds the current gateway
// CA, and of a runtime's certificate once its SKR trusts the current runtime
// CA (renewal.go), and fills the certificate expiry vsmetrics. It runs on the
// leader only.
type Keeper struct {
	// Runtime is the runtime CA's anchor (required); Gateway the gateway
	// CA's (nil: the SKR Secret's ca.crt is the runtime certificate's
	// ca.crt, a single-CA setup).
	Runtime, Gateway *Anchor
	// Client writes the client-CA Secret and requests the gateway
	// certificate's renewal; it reads uncached.
	Client client.Client
	// ClientCASecret is the gateway's client CA Secret (Istio's
	// <credentialName>-cacert, key ca.crt); none written when empty.
	// Every pass makes its data exactly {ca.crt: the client CA bundle}
	// (ClientCA): Istio reads cacert before ca.crt, and ca.crl/crl beside
	// them, so vs-controller owns every key.
	ClientCASecret types.NamespacedName
	// ClientCAConfigMap receives the same bundle (key ca.crt) in the Kyma
	// namespace, where ext-authz mounts it as its --ca-file; none when
	// empty.
	ClientCAConfigMap types.NamespacedName
	// MigrationCA, when set, is the trust window of a migration from Lifecycle
	// Manager: its CAs are added to what is written to ClientCASecret
	// (read on every pass), never to the bundles given to SKRs.
	MigrationCA *MigrationCA
	// GatewayCertificate is the gateway's server Certificate; it is renewed
	// by the new gateway CA once every runtime trusts it. Nothing is renewed
	// when empty.
	GatewayCertificate types.NamespacedName
	// Interval between refreshes; 5s when 0.
	Interval time.Duration
	// Settle is how long a new CA must have been in the trust anchors
	// before certificates are re-issued by it: the time a change of a
	// written Secret takes to reach the processes that use it (kubelet's
	// Secret volume sync, Istio's SDS push, the webhook's ca.crt reload).
	// Runtime certificates are renewed once the client CA Secret held the
	// new runtime CA for Settle; the gateway certificate once every runtime
	// held the new gateway CA for Settle.
	Settle time.Duration
	Log    logr.Logger
	// Cache is the KCP client of the runtime reconciler (the manager's
	// cached client): it lists the runtime certificates' Secrets and the
	// Kymas in KymaNamespace, and requests runtime certificate renewals;
	// set by Init.
	Cache         client.Client
	KymaNamespace string
	// Renewals limits the renewal requests of runtime certificates after a
	// CA rotation; 5 per second when nil.
	Renewals *rate.Limiter
	// Recorder reports renewals on the Kymas; none when nil.
	Recorder events.EventRecorder
	// UnknownHold bounds how long a runtime whose SKR state is unknown
	// (after a restart, an unreachable runtime) keeps every CA of the
	// runtime bundle in use: DefaultUnknownHold when 0. Past it the
	// runtime holds only the CAs its certificate and pushed state name.
	UnknownHold time.Duration
	// Now is the clock of UnknownHold (time.Now when nil).
	Now func() time.Time
	// Elected, when set (shards, issue 36), is closed once this replica is
	// the elected one: the keeper then runs on every replica; the elected
	// one keeps the bundles (Sync), the others follow what it keeps
	// (Follow) for the runtimes they own. Nil: the keeper runs on the
	// leader only (the manager's leader election), as without shards.
	Elected <-chan struct{}

	changed chan event.GenericEvent
	poke    chan struct{}
	state   atomic.Pointer[published]
	leaves  sync.Map // Secret name -> parsedLeaf
	signers sync.Map // parsed leaf (*x509.Certificate) -> *sync.Map: CA -> signed it (signers.go)
	// certSeries: the {runtime, ca} series of
	// runtime_certificate_not_after_seconds set by the last scanLeaves.
	certSeries map[[2]string]bool
	// unknownSince: runtime key -> when its SKR state was first found
	// unknown (time.Time); gone once it is known.
	unknownSince sync.Map
	// renewalSlots: runtime key -> when its reserved renewal is due.
	renewalSlots sync.Map

	// gatewayHeldSince: when every runtime first held gatewayHeldCA.
	gatewayHeldCA    string
	gatewayHeldSince time.Time
	// The gateway certificate's CA, the one before and when it changed.
	gatewayLeafCA, gatewayPrevCA string
	gatewayChangedAt             time.Time
}

// published is what the reconciler uses: a runtime CA bundle that the
// gateway's client-CA Secret already holds, and the gateway CA bundle.
type published struct {
	runtimeBundle  []byte
	runtimeCAs     []*x509.Certificate
	runtimeCurrent *x509.Certificate
	// runtimeSince: when runtimeBundle was written to the client CA Secret.
	runtimeSince   time.Time
	gatewayBundle  []byte
	gatewayCAs     []*x509.Certificate
	gatewayCurrent *x509.Certificate
}

type parsedLeaf struct {
	resourceVersion string
	cert            *x509.Certificate
}

// Init prepares the keeper for the runtime reconciler whose cached client
// is cache and whose Kymas live in kymaNamespace; it is called once, before
// Start.
func (k *Keeper) Init(cache client.Client, kymaNamespace string) {
	k.Cache, k.KymaNamespace = cache, kymaNamespace
	if k.Renewals == nil {
		k.Renewals = rate.NewLimiter(5, 1)
	}
	k.changed = make(chan event.GenericEvent, 1)
	k.poke = make(chan struct{}, 1)
	if k.Interval <= 0 {
		k.Interval = 5 * time.Second
	}
	if k.Runtime != nil && k.Runtime.InUse == nil {
		k.Runtime.InUse = k.runtimeCAsInUse
	}
	if k.Gateway != nil && k.Gateway.InUse == nil {
		k.Gateway.InUse = k.gatewayCAsInUse
	}
}

// Poke asks for a refresh now (a runtime certificate signed by a CA not in
// the bundle yet).
func (k *Keeper) Poke() {
	select {
	case k.poke <- struct{}{}:
	default:
	}
}

// Changed delivers an event whenever the published bundles changed: every
// runtime is to be reconciled again.
func (k *Keeper) Changed() <-chan event.GenericEvent { return k.changed }

// Forget drops what is known of a runtime (removed); its evidence goes
// with its Certificate.
func (k *Keeper) Forget(runtimeKey string) {
	k.renewalSlots.Delete(runtimeKey)
	k.unknownSince.Delete(runtimeKey)
}

func (k *Keeper) current() *published { return k.state.Load() }

// NeedLeaderElection: without Elected the keeper runs on the leader only;
// with it on every replica.
func (k *Keeper) NeedLeaderElection() bool { return k.Elected == nil }

// leads says whether this replica keeps the bundles (Sync) rather than
// follows them.
func (k *Keeper) leads() bool {
	if k.Elected == nil {
		return true
	}
	select {
	case <-k.Elected:
		return true
	default:
		return false
	}
}

// Start refreshes until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	elected := k.Elected
	for {
		if k.leads() {
			k.Sync(ctx)
		} else {
			k.Follow(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-k.poke:
		case <-elected:
			elected = nil // elected now: keep the bundles at once
		}
	}
}

// Follow is one pass of a replica that is not the elected one (shards):
// it publishes, for the runtimes it owns, the trust the elected replica
// keeps, read without writing anything — the runtime CAs of the sealed
// store (and the CA Secret's current CA) that the gateway's client CA
// Secret holds, and the gateway CAs of its sealed store (and the gateway
// CA Secret's current CA). It never adds trust the elected replica did not
// give the gateway: the client CA Secret is the gate, as in Sync.
func (k *Keeper) Follow(ctx context.Context) {
	prev := k.current()
	next := &published{}
	if prev != nil {
		*next = *prev
	}
	if err := k.Runtime.Load(ctx); err != nil {
		k.Log.Error(err, "read the runtime CA trust the elected replica keeps")
	} else if cas := k.Runtime.CAs(); len(cas) > 0 {
		held, err := k.clientCAs(ctx)
		if err != nil {
			k.Log.Error(err, "read the gateway's client CA Secret; the runtime CA bundle published before is kept", "secret", k.ClientCASecret.String())
		} else {
			if held != nil {
				cas = slices.DeleteFunc(cas, func(c *x509.Certificate) bool { return !slices.ContainsFunc(held, c.Equal) })
			}
			var b []byte
			if len(cas) > 0 {
				b = EncodeBundle(cas)
			}
			if prev == nil || !bytes.Equal(b, prev.runtimeBundle) {
				// Seen now: Settle counts from here (later than the
				// elected replica's write, never earlier).
				next.runtimeBundle, next.runtimeSince = b, k.now()
			}
			// The current CA only once the gateway trusts it: renewals
			// by it are asked for only then (as the elected replica does).
			cur := k.Runtime.Current()
			if cur != nil && !slices.ContainsFunc(cas, cur.Equal) {
				cur = nil
				if prev != nil {
					cur = prev.runtimeCurrent
				}
			}
			next.runtimeCAs, next.runtimeCurrent = cas, cur
		}
	}
	if k.Gateway != nil {
		if err := k.Gateway.Load(ctx); err != nil {
			k.Log.Error(err, "read the gateway CA trust the elected replica keeps")
		} else if b := k.Gateway.Bundle(); b != nil {
			next.gatewayBundle, next.gatewayCAs, next.gatewayCurrent = b, k.Gateway.CAs(), k.Gateway.Current()
		}
	}
	k.publish(prev, next, "trust bundles kept by the elected replica published; every runtime owned here is re-reconciled")
}

// publish makes next the trust in use and, when its bundles differ from
// prev's (nil: nothing published yet), logs msg and re-reconciles every
// runtime (Changed).
func (k *Keeper) publish(prev, next *published, msg string) {
	k.state.Store(next)
	if prev == nil || !bytes.Equal(prev.runtimeBundle, next.runtimeBundle) || !bytes.Equal(prev.gatewayBundle, next.gatewayBundle) {
		k.Log.Info(msg, "runtimeCAs", len(next.runtimeCAs), "gatewayCAs", len(next.gatewayCAs))
		select {
		case k.changed <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{}}:
		default: // one pending event re-reconciles every runtime already
		}
	}
}

// clientCAs are the CAs the gateway's client CA Secret holds; nil without
// a client CA Secret (nothing gates the bundle), empty when it is absent.
func (k *Keeper) clientCAs(ctx context.Context) ([]*x509.Certificate, error) {
	if k.ClientCASecret.Name == "" {
		return nil, nil
	}
	s := &corev1.Secret{}
	if err := k.Client.Get(ctx, k.ClientCASecret, s); err != nil {
		if apierrors.IsNotFound(err) {
			return []*x509.Certificate{}, nil
		}
		return nil, err
	}
	cas, _ := ParseBundle(s.Data["ca.crt"])
	if cas == nil {
		cas = []*x509.Certificate{}
	}
	return cas, nil
}

// Sync is one pass: refresh, publish, renew the gateway certificate, fill
// the vsmetrics.
func (k *Keeper) Sync(ctx context.Context) {
	prev := k.current()
	next := &published{}
	if prev != nil {
		*next = *prev
	}
	if _, err := k.Runtime.Refresh(ctx); err != nil {
		k.Log.Error(err, "refresh the runtime CA trust bundle")
	}
	var extra []*x509.Certificate
	if k.MigrationCA != nil {
		var err error
		if extra, err = k.MigrationCA.Read(ctx); err != nil {
			k.Log.Error(err, "read the migration CA Secret; its CAs of the last read are kept")
		}
	}
	if b := k.Runtime.Bundle(); b != nil {
		changed := prev == nil || !bytes.Equal(b, prev.runtimeBundle)
		clientCA, added := Merge(b, extra)
		// Every pass, against the API objects (issue 40: a deleted client
		// CA Secret stayed deleted while a memo said it was written, and
		// Istio fell back to the gateway CA). The gateway must trust a CA
		// before any runtime certificate it signs reaches an SKR: publish
		// only what the client-CA Secret holds.
		if err := k.writeClientCA(ctx, clientCA); err != nil {
			k.Log.Error(err, "write the gateway's client CA; the runtime CA bundle is not published yet", "secret", k.ClientCASecret.String(), "configMap", k.ClientCAConfigMap.String())
		} else {
			vsmetrics.ClientCAExtraCAs.Set(float64(added))
			if changed {
				next.runtimeBundle, next.runtimeCAs, next.runtimeCurrent = b, k.Runtime.CAs(), k.Runtime.Current()
				next.runtimeSince = time.Now()
			}
		}
		if !changed {
			next.runtimeCAs, next.runtimeCurrent = k.Runtime.CAs(), k.Runtime.Current()
		}
	}
	if k.Gateway != nil {
		if _, err := k.Gateway.Refresh(ctx); err != nil {
			k.Log.Error(err, "refresh the gateway CA trust bundle")
		}
		if b := k.Gateway.Bundle(); b != nil {
			next.gatewayBundle, next.gatewayCAs, next.gatewayCurrent = b, k.Gateway.CAs(), k.Gateway.Current()
		}
	}
	k.publish(prev, next, "trust bundles published; every runtime is re-reconciled")
	k.scanLeaves(ctx, next)
	if err := k.renewGatewayCertificate(ctx, next); err != nil {
		k.Log.Error(err, "renew the gateway certificate", "certificate", k.GatewayCertificate.String())
	}
}

// writeClientCA makes the gateway's client trust exactly bundlePEM,
// writing only what differs from the API objects: the client CA Secret's
// data is {ca.crt: bundle} and nothing else; the gateway credential Secret
// (the client CA Secret's name without -cacert, cert-manager's, when it
// exists) carries the bundle as cacert, which Istio reads before its ca.crt
// (the gateway CA) when the client CA Secret is missing; the ConfigMap for
// ext-authz's --ca-file holds it as ca.crt.
func (k *Keeper) writeClientCA(ctx context.Context, bundlePEM []byte) error {
	if k.ClientCASecret.Name == "" {
		return nil
	}
	want := map[string][]byte{"ca.crt": bundlePEM}
	if err := k.ensure(ctx, &corev1.Secret{ObjectMeta: k.owned(k.ClientCASecret)}, "gateway-client-ca", func(o client.Object) bool {
		s := o.(*corev1.Secret)
		if maps.EqualFunc(s.Data, want, bytes.Equal) {
			return false
		}
		s.Data = maps.Clone(want)
		return true
	}); err != nil {
		return err
	}
	if name, ok := strings.CutSuffix(k.ClientCASecret.Name, ClientCASecretSuffix); ok {
		cred := &corev1.Secret{}
		err := k.Client.Get(ctx, types.NamespacedName{Namespace: k.ClientCASecret.Namespace, Name: name}, cred)
		switch {
		case apierrors.IsNotFound(err):
			// cert-manager has not issued it yet: no server certificate,
			// no listener, nothing to fall back to.
		case err != nil:
			return err
		case !bytes.Equal(cred.Data[istioCACertKey], bundlePEM):
			if cred.Data == nil {
				cred.Data = map[string][]byte{}
			}
			cred.Data[istioCACertKey] = bundlePEM
			if err := k.Client.Update(ctx, cred); err != nil {
				return err
			}
			vsmetrics.RuntimeWrites.WithLabelValues("gateway-credential-cacert").Inc()
			k.Log.Info("gateway credential Secret given the client CA bundle as cacert", "secret", client.ObjectKeyFromObject(cred).String())
		}
	}
	if k.ClientCAConfigMap.Name == "" {
		return nil
	}
	return k.ensure(ctx, &corev1.ConfigMap{ObjectMeta: k.owned(k.ClientCAConfigMap)}, "ext-authz-client-ca", func(o client.Object) bool {
		cm := o.(*corev1.ConfigMap)
		if len(cm.Data) == 1 && cm.Data["ca.crt"] == string(bundlePEM) && len(cm.BinaryData) == 0 {
			return false
		}
		cm.Data, cm.BinaryData = map[string]string{"ca.crt": string(bundlePEM)}, nil
		return true
	})
}

// ClientCASecretSuffix ends the name of the Secret Istio reads a MUTUAL
// server's client CA from: <credentialName>-cacert.
const ClientCASecretSuffix = "-cacert"

// istioCACertKey is the key Istio reads a client CA from before ca.crt.
const istioCACertKey = "cacert"

// owned is the metadata of an object vs-controller creates at key.
func (k *Keeper) owned(key types.NamespacedName) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{contract.LabelManagedBy: diffapply.FieldOwner}}
}

// ensure reads obj (its key) and creates it, or updates it when mutate
// says it changed it; the write is counted with what and logged.
func (k *Keeper) ensure(ctx context.Context, obj client.Object, what string, mutate func(client.Object) bool) error {
	err := k.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	switch {
	case apierrors.IsNotFound(err):
		mutate(obj)
		if err := k.Client.Create(ctx, obj); err != nil {
			return err
		}
	case err != nil:
		return err
	case !mutate(obj):
		return nil
	default:
		if err := k.Client.Update(ctx, obj); err != nil {
			return err
		}
	}
	vsmetrics.RuntimeWrites.WithLabelValues(what).Inc()
	k.Log.Info("gateway client CA written", "object", what, "key", client.ObjectKeyFromObject(obj).String())
	return nil
}

// leaf is the runtime certificate in a Certificate Secret, parsed once per
// resourceVersion.
func (k *Keeper) leaf(s *corev1.Secret) *x509.Certificate {
	if v, ok := k.leaves.Load(s.Name); ok {
		if v.(parsedLeaf).resourceVersion == s.ResourceVersion {
			return v.(parsedLeaf).cert
		}
		k.signers.Delete(v.(parsedLeaf).cert)
	}
	certs, _ := ParseBundle(s.Data[corev1.TLSCertKey])
	var c *x509.Certificate
	if len(certs) > 0 {
		c = certs[0]
	}
	k.leaves.Store(s.Name, parsedLeaf{resourceVersion: s.ResourceVersion, cert: c})
	return c
}

// runtimeLeaves are the runtime certificates in the Kyma namespace (cached
// reads).
func (k *Keeper) runtimeLeaves(ctx context.Context) (map[string]*x509.Certificate, error) {
	var list corev1.SecretList
	if err := k.Cache.List(ctx, &list, client.InNamespace(k.KymaNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := map[string]*x509.Certificate{}
	listed := map[string]bool{}
	for i := range list.Items {
		s := &list.Items[i]
		id, ok := certificates.RuntimeIDOfSecret(s.Name)
		if !ok {
			continue
		}
		listed[s.Name] = true
		if c := k.leaf(s); c != nil {
			out[id] = c
		}
	}
	// Forget the certificates of deleted Secrets (a runtime gone).
	k.leaves.Range(func(name, v any) bool {
		if !listed[name.(string)] {
			k.leaves.Delete(name)
			k.signers.Delete(v.(parsedLeaf).cert)
		}
		return true
	})
	return out, nil
}

// DefaultUnknownHold is Keeper.UnknownHold's default: a day, long enough
// for an SKR to come back from an outage, short enough that a retired CA
// does not outlive a rotation because one runtime is gone.
const DefaultUnknownHold = 24 * time.Hour

// ReasonTrustStateUnknown is the Warning Event on a Kyma whose SKR state is
// unknown while it keeps old CAs in the runtime trust bundle.
const ReasonTrustStateUnknown = "TrustStateUnknown"

// runtimeCAsInUse: a CA is in use while a runtime certificate in the KCP is
// signed by it, or one given to an SKR (the one before for Settle after
// the change: the webhook may still serve it). While a runtime's SKR state
// is unknown (after a restart, an unreachable runtime), every CA is in use,
// for at most UnknownHold per runtime (metric
// trust_runtimes_state_unknown, a Warning Event on its Kyma); then the
// runtime no longer keeps CAs its state does not name.
func (k *Keeper) runtimeCAsInUse(ctx context.Context, cas []*x509.Certificate) ([]bool, error) {
	used := make([]bool, len(cas))
	all := func() ([]bool, error) {
		for i := range used {
			used[i] = true
		}
		return used, nil
	}
	leaves, err := k.runtimeLeaves(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range leaves {
		if i := k.signedBy(l, cas); i >= 0 {
			used[i] = true
		}
	}
	rts, err := k.trustRuntimes(ctx)
	if err != nil {
		return nil, err
	}
	index := map[string]int{}
	for i, c := range cas {
		index[Fingerprint(c)] = i
	}
	hold := k.UnknownHold
	if hold == 0 {
		hold = DefaultUnknownHold
	}
	now := k.now()
	holding := 0
	for _, rt := range rts {
		if !rt.known {
			first, seen := k.unknownSince.LoadOrStore(rt.key, now)
			if since := first.(time.Time); now.Sub(since) < hold {
				holding++
				if !seen && k.Recorder != nil {
					ref := rt.kyma.DeepCopy()
					ref.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
					k.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, ReasonTrustStateUnknown, "KeepCAs",
						"%s", fmt.Sprintf("the runtime's SKR state is unknown: every CA of the runtime trust bundle is kept until it is known, at most until %s",
							since.Add(hold).UTC().Format(time.RFC3339)))
				}
			}
			continue
		}
		k.unknownSince.Delete(rt.key)
		ev := rt.evidence
		if j, ok := index[ev.CA]; ok {
			used[j] = true
		}
		if j, ok := index[ev.PrevCA]; ok && ev.ChangedAt != nil && now.Sub(*ev.ChangedAt) < k.Settle {
			used[j] = true
		}
	}
	vsmetrics.TrustRuntimesStateUnknown.Set(float64(holding))
	if holding > 0 {
		return all()
	}
	return used, nil
}

// gatewayCAsInUse: a gateway CA is in use while it signs the gateway's
// server certificate.
func (k *Keeper) gatewayCAsInUse(ctx context.Context, cas []*x509.Certificate) ([]bool, error) {
	used := make([]bool, len(cas))
	leaf, err := k.gatewayLeaf(ctx)
	if err != nil || leaf == nil {
		// Unknown: keep every CA.
		for i := range used {
			used[i] = true
		}
		return used, err
	}
	fp := ""
	if i := SignedBy(leaf, cas); i >= 0 {
		used[i], fp = true, Fingerprint(cas[i])
	}
	if fp != k.gatewayLeafCA {
		k.gatewayPrevCA, k.gatewayLeafCA, k.gatewayChangedAt = k.gatewayLeafCA, fp, time.Now()
	}
	// The gateway may serve the certificate before for Settle (Istio's
	// SDS push): keep its CA in the SKRs' ca.crt meanwhile.
	for i, c := range cas {
		if Fingerprint(c) == k.gatewayPrevCA && time.Since(k.gatewayChangedAt) < k.Settle {
			used[i] = true
		}
	}
	return used, nil
}

func (k *Keeper) gatewayCertificate(ctx context.Context) (*certmanagerv1.Certificate, error) {
	if k.GatewayCertificate.Name == "" {
		return nil, nil
	}
	crt := &certmanagerv1.Certificate{}
	if err := k.Client.Get(ctx, k.GatewayCertificate, crt); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return crt, nil
}

func (k *Keeper) gatewayLeaf(ctx context.Context) (*x509.Certificate, error) {
	crt, err := k.gatewayCertificate(ctx)
	if err != nil || crt == nil {
		return nil, err
	}
	s := &corev1.Secret{}
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: crt.Namespace, Name: crt.Spec.SecretName}, s); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	certs, _ := ParseBundle(s.Data[corev1.TLSCertKey])
	if len(certs) == 0 {
		return nil, nil
	}
	return certs[0], nil
}

// renewGatewayCertificate requests a new gateway server certificate when it
// is not signed by the current gateway CA and every runtime holds that CA
// (evidence, not a timer).
func (k *Keeper) renewGatewayCertificate(ctx context.Context, p *published) error {
	if k.Gateway == nil || p.gatewayCurrent == nil || k.GatewayCertificate.Name == "" {
		return nil
	}
	leaf, err := k.gatewayLeaf(ctx)
	if err != nil || leaf == nil || SignedBy(leaf, []*x509.Certificate{p.gatewayCurrent}) == 0 {
		return err
	}
	rts, err := k.trustRuntimes(ctx)
	if err != nil {
		return err
	}
	want := Fingerprint(p.gatewayCurrent)
	waiting := 0
	for _, rt := range rts {
		if !strings.Contains(rt.evidence.Gateway, ","+want+",") {
			waiting++
		}
	}
	if waiting > 0 {
		k.gatewayHeldCA = ""
		k.Log.V(1).Info("gateway certificate waits for runtimes to trust the new gateway CA", "runtimes", waiting)
		return nil
	}
	if k.gatewayHeldCA != want {
		k.gatewayHeldCA, k.gatewayHeldSince = want, time.Now()
	}
	if time.Since(k.gatewayHeldSince) < k.Settle {
		return nil // the SKRs' webhooks load their ca.crt meanwhile
	}
	crt, err := k.gatewayCertificate(ctx)
	if err != nil || crt == nil {
		return err
	}
	requested, err := requestIssuing(ctx, k.Client, crt)
	if requested {
		vsmetrics.RenewalsRequested.Inc()
		k.Log.Info("every runtime trusts the new gateway CA: renewal of the gateway certificate requested", "certificate", k.GatewayCertificate.String(), "ca", want)
	}
	return err
}

// scanLeaves fills the per-runtime certificate metrics and counts runtimes
// on an old CA and certificates that expire soon.
func (k *Keeper) scanLeaves(ctx context.Context, p *published) {
	leaves, err := k.runtimeLeaves(ctx)
	if err != nil {
		k.Log.Error(err, "list runtime certificates for the expiry metrics")
		return
	}
	now := time.Now()
	onOld, soon := 0, 0
	series := make(map[[2]string]bool, len(leaves))
	for id, l := range leaves {
		ca, signer := "unknown", (*x509.Certificate)(nil)
		if i := k.signedBy(l, p.runtimeCAs); i >= 0 {
			ca, signer = Fingerprint(p.runtimeCAs[i]), p.runtimeCAs[i]
		}
		series[[2]string{id, ca}] = true
		vsmetrics.RuntimeCertNotAfter.WithLabelValues(id, ca).Set(float64(l.NotAfter.Unix()))
		if p.runtimeCurrent != nil && k.signedBy(l, []*x509.Certificate{p.runtimeCurrent}) != 0 {
			onOld++
		}
		if Expiry(l, signer).Sub(now) < ExpiringSoon {
			soon++
		}
	}
	// Remove the series of runtimes gone and of CAs a runtime moved away
	// from, rather than resetting the vector before filling it again: a
	// scrape in between would see no runtime at all.
	for s := range k.certSeries {
		if !series[s] {
			vsmetrics.RuntimeCertNotAfter.DeleteLabelValues(s[0], s[1])
		}
	}
	k.certSeries = series
	vsmetrics.RuntimesOnOldCA.Set(float64(onOld))
	vsmetrics.RuntimesExpiringSoon.Set(float64(soon))
}

// requestIssuing is RequestIssuing after a CA rotation.
func requestIssuing(ctx context.Context, c client.Client, crt *certmanagerv1.Certificate) (bool, error) {
	return RequestIssuing(ctx, c, crt, "a newer CA exists")
}

// RequestIssuing sets the Issuing condition, as `cmctl renew` does, saying
// why in its message; false when it is already set.
func RequestIssuing(ctx context.Context, c client.Client, crt *certmanagerv1.Certificate, why string) (bool, error) {
	for _, cond := range crt.Status.Conditions {
		if cond.Type == certmanagerv1.CertificateConditionIssuing && cond.Status == "True" {
			return false, nil
		}
	}
	orig := crt.DeepCopy()
	now := metav1.Now()
	crt.Status.Conditions = append(crt.Status.Conditions, certmanagerv1.CertificateCondition{
		Type: certmanagerv1.CertificateConditionIssuing, Status: "True", LastTransitionTime: &now,
		Reason: "ManuallyTriggered", Message: "Certificate re-issuance requested by vs-controller: " + why,
		ObservedGeneration: crt.Generation,
	})
	if err := c.Status().Patch(ctx, crt, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("request renewal of Certificate %s/%s: %w", crt.Namespace, crt.Name, err)
	}
	vsmetrics.RuntimeWrites.WithLabelValues("certificate-renewal").Inc()
	return true, nil
}

// gatewayFingerprints is ",fp1,fp2,…," of the CAs in a gateway bundle.
func gatewayFingerprints(cas []*x509.Certificate) string {
	var b strings.Builder
	b.WriteString(",")
	for _, c := range cas {
		b.WriteString(Fingerprint(c) + ",")
	}
	return b.String()
}
