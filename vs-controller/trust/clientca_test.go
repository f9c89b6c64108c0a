package trust

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// TestClientCARepairedEveryPass (issue 40, finding 3): with the gateway's
// client CA Secret missing, Istio serves the ca.crt of the gateway
// credential — the gateway CA — as the client trust. The keeper repairs
// the client trust on every pass against the API objects, never a memo:
// a deleted client CA Secret comes back at the next pass, every key Istio
// reads from it (cacert, ca.crl, crl) other than the bundle is removed,
// the gateway credential carries the bundle as cacert (read before its
// ca.crt when the client CA Secret is missing), and ext-authz's --ca-file
// ConfigMap holds the same bundle.
func TestClientCARepairedEveryPass(t *testing.T) {
	ctx := context.Background()
	c := keeperClient(t)
	caSecret := types.NamespacedName{Namespace: keeperNS, Name: "runtime-ca"}
	clientCA := types.NamespacedName{Namespace: "istio-system", Name: "kcp-gateway-tls-cacert"}
	credential := types.NamespacedName{Namespace: "istio-system", Name: "kcp-gateway-tls"}
	forExtAuthz := types.NamespacedName{Namespace: keeperNS, Name: "trust" + ClientCAConfigMapSuffix}
	seal := &Seal{Client: c, Secret: types.NamespacedName{Namespace: "istio-system", Name: "trust-seal"}}
	k := &Keeper{
		Runtime: &Anchor{Name: "clientca-test", Client: c, Secret: caSecret, Seal: seal, Log: logr.Discard(),
			Store: types.NamespacedName{Namespace: keeperNS, Name: "trust-runtime"}},
		Client: c, ClientCASecret: clientCA, ClientCAConfigMap: forExtAuthz, Log: logr.Discard(),
	}
	k.Init(c, keeperNS)
	runtimeCA, gatewayCA := pki.MustCA(t, "runtime-ca"), pki.MustCA(t, "gateway-ca")
	putSecret(t, c, caSecret.Name, map[string][]byte{"tls.crt": runtimeCA.PEM})
	// cert-manager's gateway credential: its ca.crt is the gateway CA.
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: credential.Namespace, Name: credential.Name},
		Data: map[string][]byte{"tls.crt": []byte("server"), "tls.key": []byte("key"), "ca.crt": gatewayCA.PEM}}); err != nil {
		t.Fatal(err)
	}

	check := func(when string) {
		t.Helper()
		s := &corev1.Secret{}
		if err := c.Get(ctx, clientCA, s); err != nil {
			t.Fatalf("%s: client CA Secret: %v", when, err)
		}
		if want := map[string][]byte{"ca.crt": runtimeCA.PEM}; !maps.EqualFunc(s.Data, want, bytes.Equal) {
			t.Errorf("%s: client CA Secret holds keys %v, want exactly ca.crt = the runtime CA", when, keys(s.Data))
		}
		cred := &corev1.Secret{}
		if err := c.Get(ctx, credential, cred); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(cred.Data["cacert"], runtimeCA.PEM) {
			t.Errorf("%s: the gateway credential's cacert is %q, want the runtime CA bundle (Istio's fallback reads it before ca.crt)", when, cred.Data["cacert"])
		}
		if !bytes.Equal(cred.Data["ca.crt"], gatewayCA.PEM) || string(cred.Data["tls.key"]) != "key" {
			t.Errorf("%s: the gateway credential's own keys were changed", when)
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, forExtAuthz, cm); err != nil {
			t.Fatalf("%s: ext-authz's client CA ConfigMap: %v", when, err)
		}
		if len(cm.Data) != 1 || cm.Data["ca.crt"] != string(runtimeCA.PEM) {
			t.Errorf("%s: ext-authz's client CA ConfigMap holds %v, want exactly ca.crt = the runtime CA", when, cm.Data)
		}
	}
	k.Sync(ctx)
	check("first pass")

	// Deleted: back at the next pass, although the bundle did not change.
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: clientCA.Namespace, Name: clientCA.Name}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: forExtAuthz.Namespace, Name: forExtAuthz.Name}}); err != nil {
		t.Fatal(err)
	}
	k.Sync(ctx)
	check("after both were deleted")

	// Keys Istio reads before or beside ca.crt, written by somebody else:
	// the gateway CA as cacert, a CRL; and the credential's cacert.
	s := &corev1.Secret{}
	if err := c.Get(ctx, clientCA, s); err != nil {
		t.Fatal(err)
	}
	s.Data["cacert"], s.Data["ca.crl"], s.Data["crl"] = gatewayCA.PEM, []byte("crl"), []byte("crl")
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	cred := &corev1.Secret{}
	if err := c.Get(ctx, credential, cred); err != nil {
		t.Fatal(err)
	}
	cred.Data["cacert"] = gatewayCA.PEM
	if err := c.Update(ctx, cred); err != nil {
		t.Fatal(err)
	}
	k.Sync(ctx)
	check("after foreign keys were written")

	// No credential yet (cert-manager has not issued it): nothing created.
	if err := c.Delete(ctx, cred); err != nil {
		t.Fatal(err)
	}
	k.Sync(ctx)
	if err := c.Get(ctx, credential, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the keeper created the gateway credential: %v", err)
	}
}

func keys(m map[string][]byte) []string {
	return slices.Sorted(maps.Keys(m))
}
