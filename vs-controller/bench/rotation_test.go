package bench_test

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	istioapiv1 "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
)

var (
	rotRuntimes = flag.Int("vsbench.rotation-runtimes", 100, "runtimes in BenchmarkCARotation")
	rotWatchers = flag.Int("vsbench.rotation-watchers", 10, "Watchers in BenchmarkCARotation (webhooks per runtime's configuration)")
	rotSettle   = flag.Duration("vsbench.ca-settle", 10*time.Second, "vs-controller --ca-settle in BenchmarkCARotation (the binary's default is 2m; the benchmark has no kubelet or Istio to wait for)")
)

// The PKI of manifests/kcp/base/pki.yaml (names as there).
const (
	runtimeCAName  = "runtime-watcher-ca"
	gatewayCAName  = "kcp-gateway-ca"
	gatewayTLSName = "kcp-gateway-tls"
	clientCAName   = gatewayTLSName + "-cacert"
)

// BenchmarkCARotation: N runtimes converged on a runtime CA and a gateway
// CA, then the runtime CA is rotated with a new key (as `cmctl renew` does:
// Issuing=True on the CA Certificate), then the gateway CA. Measured from the
// moment the CA Secret changed, with informers on both API servers:
//
//   - runtime CA: trust — the gateway's client CA Secret and every SKR's
//     webhook configuration caBundle hold the new CA; leaves — every runtime
//     certificate (KCP Secret and the SKR's skr-webhook-tls) is signed by
//     it; drop — the old CA is gone from all of them;
//   - gateway CA: trust — every SKR's skr-webhook-tls ca.crt holds the new
//     gateway CA; leaves — the gateway's server certificate is signed by
//     it; drop — the old one is gone from every ca.crt.
//
// vs-controller runs with the binary's defaults (renewals 5/s, CA poll 5 s,
// 8 runtime workers, KCP client 50 QPS) except --ca-settle
// (-vsbench.ca-settle, 10 s: there is no kubelet or Istio to wait for; the
// binary's 2 m adds to each settle-bound step). All runtimes point at one
// shared SKR API server, each in its own namespace (see the package comment).
func BenchmarkCARotation(b *testing.B) {
	benchLogger(b)
	ctx := b.Context()
	n, w := *rotRuntimes, *rotWatchers
	if testing.Short() {
		n, w = 20, 5
	}
	f := setupRotation(b, ctx, n, w)
	b.Logf("fixture: %d runtimes, %d Watchers, settle %s (all runtimes on one SKR API server, isolated by namespace)", n, w, *rotSettle)

	for b.Loop() {
		start := time.Now()
		stop := f.rotationController(b, ctx)
		obs := f.observe(b, ctx, n)
		if err := obs.wait(ctx, "converged", 30*time.Minute, obs.converged); err != nil {
			b.Fatal(err)
		}
		for !idle() {
			waitTick(ctx, 500*time.Millisecond)
		}
		b.Logf("converged in %s", time.Since(start).Round(time.Millisecond))
		b.ReportMetric(time.Since(start).Seconds(), "converge-s")

		f.kcpCount.reset()
		f.skrCount.reset()
		rt := obs.rotate(b, ctx, f, "runtime", types.NamespacedName{Namespace: kymaNS, Name: runtimeCAName})
		b.Logf("runtime CA: trust in every SKR %s, every leaf re-issued %s, old CA dropped %s; KCP %d requests, %d writes (%s); SKR %d requests, %d writes (%s)",
			rt[0], rt[1], rt[2], f.kcpCount.total.Load(), f.kcpCount.write.Load(), f.kcpCount.breakdown(), f.skrCount.total.Load(), f.skrCount.write.Load(), f.skrCount.breakdown())
		b.ReportMetric(float64(f.kcpCount.total.Load()+f.skrCount.total.Load())/float64(n), "rt-requests/runtime")
		f.kcpCount.reset()
		f.skrCount.reset()
		gw := obs.rotate(b, ctx, f, "gateway", types.NamespacedName{Namespace: gatewayNS, Name: gatewayCAName})
		b.Logf("gateway CA: trust in every SKR %s, gateway certificate re-issued %s, old CA dropped %s; KCP %d requests, %d writes (%s); SKR %d requests, %d writes (%s)",
			gw[0], gw[1], gw[2], f.kcpCount.total.Load(), f.kcpCount.write.Load(), f.kcpCount.breakdown(), f.skrCount.total.Load(), f.skrCount.write.Load(), f.skrCount.breakdown())
		stop()
		for i, name := range []string{"trust", "leaves", "drop"} {
			b.ReportMetric(rt[i].Seconds(), "rt-"+name+"-s")
		}
		for i, name := range []string{"trust", "cert", "drop"} {
			b.ReportMetric(gw[i].Seconds(), "gw-"+name+"-s")
		}
	}
}

// setupRotation creates the KCP and SKR API servers, the PKI (self-signed
// Issuer -> CA Certificate with rotationPolicy Always -> CA Issuer, for the
// runtime CA in the Kyma namespace and the gateway CA in the gateway
// namespace, and the gateway's server Certificate), w Watchers and n
// runtimes, and runs cert-manager's vsmanager.
func setupRotation(b *testing.B, ctx context.Context, n, w int) *fixture {
	f := &fixture{w: w, r: n, kcpCount: newCounter(), skrCount: newCounter()}
	var err error
	if f.env, err = testenv.Start("kcp"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.env.Stop() })
	f.kcp = f.env.Cluster("kcp")
	if f.skr, err = startSKR(b); err != nil {
		b.Fatal(err)
	}
	fastCfg := rest.CopyConfig(f.kcp.Config)
	fastCfg.QPS, fastCfg.Burst = 1000, 2000
	fast, err := client.New(fastCfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{kymaNS, gatewayNS, watcherNS} {
		if err := fast.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, o := range rotationPKI() {
		if err := fast.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	f.runCertManager(b, ctx)
	gw := &istionetworkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "kcp-gateway", Namespace: gatewayNS, Labels: map[string]string{"app": "watcher"}}}
	gw.Spec.Servers = []*istioapiv1.Server{{Port: &istioapiv1.Port{Number: 443, Name: "https", Protocol: "HTTPS"}, Hosts: []string{"*.kcp.example.com", "gateway.kcp.example.com"}}}
	if err := fast.Create(ctx, gw); err != nil {
		b.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(f.skr.KubeconfigPath)
	if err != nil {
		b.Fatal(err)
	}
	parallel(w, func(i int) error {
		return fast.Create(ctx, benchWatcher(i))
	}, b)
	parallel(n, func(i int) error {
		id := fmt.Sprintf("runtime-%04d", i)
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: skrclient.SecretName(id)},
			Data:       map[string][]byte{skrclient.SecretKey: kubeconfig},
		}
		if err := fast.Create(ctx, s); err != nil {
			return err
		}
		k := &unstructured.Unstructured{}
		k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		k.SetNamespace(kymaNS)
		k.SetName(id)
		k.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: id + ".skr.example.com"})
		return fast.Create(ctx, k)
	}, b)
	return f
}

func rotationPKI() []client.Object {
	var objs []client.Object
	for _, ca := range []struct{ ns, name string }{{kymaNS, runtimeCAName}, {gatewayNS, gatewayCAName}} {
		selfSigned := ca.name + "-selfsigned"
		objs = append(objs,
			&certmanagerv1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ca.ns, Name: selfSigned},
				Spec: certmanagerv1.IssuerSpec{IssuerConfig: certmanagerv1.IssuerConfig{SelfSigned: &certmanagerv1.SelfSignedIssuer{}}}},
			&certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ca.ns, Name: ca.name},
				Spec: certmanagerv1.CertificateSpec{
					IsCA: true, CommonName: ca.name, SecretName: ca.name,
					Duration: &metav1.Duration{Duration: 8760 * time.Hour}, RenewBefore: &metav1.Duration{Duration: 720 * time.Hour},
					PrivateKey: &certmanagerv1.CertificatePrivateKey{RotationPolicy: certmanagerv1.RotationPolicyAlways,
						Algorithm: certmanagerv1.ECDSAKeyAlgorithm, Size: 256},
					IssuerRef: cmmeta.IssuerReference{Group: "cert-manager.io", Kind: "Issuer", Name: selfSigned},
				}},
			&certmanagerv1.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: ca.ns, Name: ca.name},
				Spec: certmanagerv1.IssuerSpec{IssuerConfig: certmanagerv1.IssuerConfig{CA: &certmanagerv1.CAIssuer{SecretName: ca.name}}}},
		)
	}
	return append(objs, &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: gatewayNS, Name: gatewayTLSName},
		Spec: certmanagerv1.CertificateSpec{
			SecretName: gatewayTLSName, DNSNames: []string{"gateway.kcp.example.com"},
			PrivateKey: &certmanagerv1.CertificatePrivateKey{RotationPolicy: certmanagerv1.RotationPolicyAlways,
				Algorithm: certmanagerv1.ECDSAKeyAlgorithm, Size: 256},
			IssuerRef: cmmeta.IssuerReference{Group: "cert-manager.io", Kind: "Issuer", Name: gatewayCAName},
		}})
}

// rotationOptions are the trust options of the benchmark's controller: the
// binary's defaults and names, --ca-settle from the flag.
func rotationOptions() trust.Options {
	return trust.Options{
		CASecret:              types.NamespacedName{Namespace: kymaNS, Name: runtimeCAName},
		GatewayCASecret:       types.NamespacedName{Namespace: gatewayNS, Name: gatewayCAName},
		GatewayClientCASecret: types.NamespacedName{Namespace: gatewayNS, Name: clientCAName},
		GatewayCertificate:    types.NamespacedName{Namespace: gatewayNS, Name: gatewayTLSName},
		RenewalsPerSecond:     5,
		Interval:              5 * time.Second,
		Settle:                *rotSettle,
	}
}

// observer keeps, from informers on both API servers, what every trust
// anchor and certificate holds now.
type observer struct {
	n  int
	mu sync.Mutex
	// Current CAs (tls.crt of the CA Secrets) and when each last changed.
	ca        map[string]*x509.Certificate
	caChanged map[string]time.Time
	clientCA  []*x509.Certificate
	gwLeaf    *x509.Certificate
	kcpLeaf   map[string]*x509.Certificate   // runtime ID -> KCP Secret tls.crt
	vwcCAs    map[string][]*x509.Certificate // runtime ID -> webhook configuration caBundle
	skrCAs    map[string][]*x509.Certificate // runtime ID -> SKR Secret ca.crt
	skrLeaf   map[string]*x509.Certificate   // runtime ID -> SKR Secret tls.crt
	// renewals: when a runtime Certificate was first seen with Issuing=True
	// (a renewal requested) since the last reset.
	renewals map[string]time.Time
	// signed remembers signature checks (leaf, CA): the conditions are
	// evaluated every 100 ms over every runtime, and an ECDSA verification
	// each time cost the benchmark process more CPU than the controller.
	signed map[[2]*x509.Certificate]bool
}

// observe starts informers on the KCP's and the SKR's Secrets and webhook
// configurations and waits for their caches.
func (f *fixture) observe(b *testing.B, ctx context.Context, n int) *observer {
	o := &observer{n: n, ca: map[string]*x509.Certificate{}, caChanged: map[string]time.Time{},
		kcpLeaf: map[string]*x509.Certificate{}, vwcCAs: map[string][]*x509.Certificate{},
		skrCAs: map[string][]*x509.Certificate{}, skrLeaf: map[string]*x509.Certificate{}, renewals: map[string]time.Time{},
		signed: map[[2]*x509.Certificate]bool{}}
	kcpCache, err := cache.New(f.kcp.Config, cache.Options{Scheme: testenv.Scheme(),
		DefaultNamespaces: map[string]cache.Config{kymaNS: {}, gatewayNS: {}}})
	if err != nil {
		b.Fatal(err)
	}
	skrCache, err := cache.New(f.skr.Config, cache.Options{Scheme: testenv.Scheme(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", bundle.SecretName)},
	}})
	if err != nil {
		b.Fatal(err)
	}
	handle := func(on func(obj any)) toolscache.ResourceEventHandlerFuncs {
		return toolscache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }}
	}
	for _, reg := range []struct {
		c   cache.Cache
		obj client.Object
		on  func(any)
	}{
		{kcpCache, &corev1.Secret{}, func(obj any) { o.kcpSecret(obj.(*corev1.Secret)) }},
		{kcpCache, &certmanagerv1.Certificate{}, func(obj any) { o.certificate(obj.(*certmanagerv1.Certificate)) }},
		{skrCache, &corev1.Secret{}, func(obj any) { o.skrSecret(obj.(*corev1.Secret)) }},
		{skrCache, &admissionregistrationv1.ValidatingWebhookConfiguration{}, func(obj any) {
			o.vwc(obj.(*admissionregistrationv1.ValidatingWebhookConfiguration))
		}},
	} {
		inf, err := reg.c.GetInformer(ctx, reg.obj)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inf.AddEventHandler(handle(reg.on)); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []cache.Cache{kcpCache, skrCache} {
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			b.Fatal("observer caches did not sync")
		}
	}
	return o
}

func first(pemData []byte) *x509.Certificate {
	cs, _ := trust.ParseBundle(pemData)
	if len(cs) == 0 {
		return nil
	}
	return cs[0]
}

func (o *observer) kcpSecret(s *corev1.Secret) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case s.Name == runtimeCAName || s.Name == gatewayCAName:
		anchor := map[string]string{runtimeCAName: "runtime", gatewayCAName: "gateway"}[s.Name]
		c := first(s.Data[corev1.TLSCertKey])
		if c != nil && (o.ca[anchor] == nil || !c.Equal(o.ca[anchor])) {
			o.ca[anchor], o.caChanged[anchor] = c, time.Now()
		}
	case s.Namespace == gatewayNS && s.Name == gatewayTLSName:
		o.gwLeaf = first(s.Data[corev1.TLSCertKey])
	case s.Namespace == gatewayNS && s.Name == clientCAName:
		o.clientCA, _ = trust.ParseBundle(s.Data["ca.crt"])
	case s.Namespace == kymaNS:
		if id, ok := certificates.RuntimeIDOfSecret(s.Name); ok {
			o.kcpLeaf[id] = first(s.Data[corev1.TLSCertKey])
		}
	}
}

func (o *observer) certificate(c *certmanagerv1.Certificate) {
	id, ok := certificates.RuntimeIDOfSecret(c.Name)
	if !ok {
		return
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == certmanagerv1.CertificateConditionIssuing && cond.Status == cmmeta.ConditionTrue {
			o.mu.Lock()
			if _, seen := o.renewals[id]; !seen {
				o.renewals[id] = time.Now()
			}
			o.mu.Unlock()
		}
	}
}

// renewalSpread is when the first and the last renewal since the last
// reset were requested, relative to from, and how many.
func (o *observer) renewalSpread(from time.Time) (first, last time.Duration, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range o.renewals {
		d := t.Sub(from)
		if n == 0 || d < first {
			first = d
		}
		if d > last {
			last = d
		}
		n++
	}
	return first.Round(100 * time.Millisecond), last.Round(100 * time.Millisecond), n
}

func (o *observer) skrSecret(s *corev1.Secret) {
	id, ok := strings.CutPrefix(s.Namespace, "skr-")
	if !ok {
		return
	}
	cas, _ := trust.ParseBundle(s.Data["ca.crt"])
	o.mu.Lock()
	defer o.mu.Unlock()
	o.skrCAs[id], o.skrLeaf[id] = cas, first(s.Data[corev1.TLSCertKey])
}

func (o *observer) vwc(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
	id, ok := strings.CutPrefix(v.Name, bundle.Name+"-")
	if !ok || len(v.Webhooks) == 0 {
		return
	}
	// The anchor is what every webhook of the configuration trusts.
	cas, _ := trust.ParseBundle(v.Webhooks[0].ClientConfig.CABundle)
	for _, wh := range v.Webhooks[1:] {
		other, _ := trust.ParseBundle(wh.ClientConfig.CABundle)
		cas = intersect(cas, other)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.vwcCAs[id] = cas
}

func intersect(a, b []*x509.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range a {
		if holds(b, c) {
			out = append(out, c)
		}
	}
	return out
}

func holds(cas []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range cas {
		if x.Equal(c) {
			return true
		}
	}
	return false
}

// signedBy: the observer is locked.
func (o *observer) signedBy(leaf, ca *x509.Certificate) bool {
	if leaf == nil || ca == nil {
		return false
	}
	k := [2]*x509.Certificate{leaf, ca}
	ok, known := o.signed[k]
	if !known {
		ok = trust.SignedBy(leaf, []*x509.Certificate{ca}) == 0
		o.signed[k] = ok
	}
	return ok
}

// every counts the runtimes for which ok holds (the observer is locked).
func (o *observer) every(ok func(id string) bool) (int, bool) {
	c := 0
	for i := range o.n {
		if ok(fmt.Sprintf("runtime-%04d", i)) {
			c++
		}
	}
	return c, c == o.n
}

// converged: every runtime's SKR trusts the current CAs and holds a leaf of
// the current runtime CA.
func (o *observer) converged() (string, bool) {
	rt, gw := o.ca["runtime"], o.ca["gateway"]
	if rt == nil || gw == nil || o.gwLeaf == nil {
		return "CAs not issued yet", false
	}
	c, ok := o.every(func(id string) bool {
		return holds(o.vwcCAs[id], rt) && holds(o.skrCAs[id], gw) && o.signedBy(o.skrLeaf[id], rt)
	})
	return fmt.Sprintf("%d/%d runtimes set up", c, o.n), ok && holds(o.clientCA, rt)
}

// wait polls cond (under the lock) every 100 ms until it holds; progress
// goes to stderr every 10 s.
func (o *observer) wait(ctx context.Context, what string, timeout time.Duration, cond func() (string, bool)) error {
	start, lastLog := time.Now(), time.Now()
	for {
		o.mu.Lock()
		why, ok := cond()
		o.mu.Unlock()
		if ok {
			return nil
		}
		if time.Since(lastLog) > 10*time.Second {
			fmt.Fprintf(os.Stderr, "vsbench %5.0fs %s: %s\n", time.Since(start).Seconds(), what, why)
			lastLog = time.Now()
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("%s: not reached within %s: %s", what, timeout, why)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		waitTick(ctx, 100*time.Millisecond)
	}
}

// rotate renews a CA Certificate as `cmctl renew` does and returns, from
// the moment its Secret held the new CA: trust (every anchor holds it),
// leaves (every certificate it must sign does), drop (the old CA is gone
// from every anchor).
func (o *observer) rotate(b *testing.B, ctx context.Context, f *fixture, anchor string, key types.NamespacedName) [3]time.Duration {
	c, err := client.New(f.kcp.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	o.mu.Lock()
	old := o.ca[anchor]
	o.renewals = map[string]time.Time{}
	o.mu.Unlock()
	crt := &certmanagerv1.Certificate{}
	if err := c.Get(ctx, key, crt); err != nil {
		b.Fatal(err)
	}
	orig := crt.DeepCopy()
	crt.Status.Conditions = append(crt.Status.Conditions, certmanagerv1.CertificateCondition{
		Type: certmanagerv1.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
		Reason: "ManuallyTriggered", Message: "Certificate re-issuance manually triggered",
	})
	if err := c.Status().Patch(ctx, crt, client.MergeFrom(orig)); err != nil {
		b.Fatal(err)
	}
	var next *x509.Certificate
	if err := o.wait(ctx, anchor+" CA renewed", time.Minute, func() (string, bool) {
		next = o.ca[anchor]
		return "CA Secret unchanged", next != nil && !next.Equal(old)
	}); err != nil {
		b.Fatal(err)
	}
	o.mu.Lock()
	changed := o.caChanged[anchor]
	o.mu.Unlock()

	var trustCond, leafCond, dropCond func() (string, bool)
	if anchor == "runtime" {
		trustCond = func() (string, bool) {
			c, ok := o.every(func(id string) bool { return holds(o.vwcCAs[id], next) })
			return fmt.Sprintf("%d/%d caBundles hold the new CA", c, o.n), ok && holds(o.clientCA, next)
		}
		leafCond = func() (string, bool) {
			c, ok := o.every(func(id string) bool { return o.signedBy(o.kcpLeaf[id], next) && o.signedBy(o.skrLeaf[id], next) })
			return fmt.Sprintf("%d/%d runtime certificates of the new CA in the SKR", c, o.n), ok
		}
		dropCond = func() (string, bool) {
			c, ok := o.every(func(id string) bool { return holds(o.vwcCAs[id], next) && !holds(o.vwcCAs[id], old) })
			return fmt.Sprintf("%d/%d caBundles without the old CA", c, o.n), ok && !holds(o.clientCA, old)
		}
	} else {
		trustCond = func() (string, bool) {
			c, ok := o.every(func(id string) bool { return holds(o.skrCAs[id], next) })
			return fmt.Sprintf("%d/%d SKR ca.crt hold the new gateway CA", c, o.n), ok
		}
		leafCond = func() (string, bool) { return "gateway certificate of the old CA", o.signedBy(o.gwLeaf, next) }
		dropCond = func() (string, bool) {
			c, ok := o.every(func(id string) bool { return holds(o.skrCAs[id], next) && !holds(o.skrCAs[id], old) })
			return fmt.Sprintf("%d/%d SKR ca.crt without the old gateway CA", c, o.n), ok
		}
	}
	var out [3]time.Duration
	timeout := 10*time.Minute + time.Duration(o.n)*time.Second
	for i, step := range []struct {
		name string
		cond func() (string, bool)
	}{{"trust", trustCond}, {"leaves", leafCond}, {"drop", dropCond}} {
		if err := o.wait(ctx, anchor+" CA "+step.name, timeout, step.cond); err != nil {
			b.Fatal(err)
		}
		out[i] = time.Since(changed).Round(100 * time.Millisecond)
		fmt.Fprintf(os.Stderr, "vsbench %s CA %s after %s\n", anchor, step.name, out[i])
	}
	if first, last, n := o.renewalSpread(changed); n > 0 {
		rate := 0.0
		if last > first {
			rate = float64(n-1) / (last - first).Seconds()
		}
		b.Logf("%s CA: %d runtime certificate renewals requested from %s to %s after the CA change (%.2f/s)", anchor, n, first, last, rate)
		if anchor == "runtime" {
			b.ReportMetric(rate, "renewals/s")
		}
	}
	return out
}

// rotationController starts a vs-controller manager like startController,
// with the CA rotation on (rotationOptions).
func (f *fixture) rotationController(b *testing.B, ctx context.Context) (stop func()) {
	cfg := rest.CopyConfig(f.kcp.Config)
	cfg.QPS, cfg.Burst = 50, 100 // the binary's defaults
	cfg.Wrap(transport.WrapperFunc(f.kcpCount.wrap))
	ctx, cancel := context.WithCancel(ctx)
	mgr, err := vsmanager.New(ctx, cfg, vsmanager.Options{
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
		GatewayNamespace:       gatewayNS,
		KymaNamespace:          kymaNS,
		Issuer:                 cmmeta.IssuerReference{Name: runtimeCAName, Kind: "Issuer", Group: "cert-manager.io"},
		Bundle:                 bundle.Options{KCPAddr: "gateway.kcp.example.com"},
		Clients:                &isolated{inner: skrClients(f.skrCount.wrap)},
		Trust:                  rotationOptions(),
		SkipNameValidation:     true,
	})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}
