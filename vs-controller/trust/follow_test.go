package trust

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// TestFollowerPublishesOnlyWhatTheGatewayTrusts (issue 36): a replica
// that does not lead publishes, for the runtimes it owns, the runtime CAs
// the elected replica keeps — read from the sealed store and the CA
// Secret — but only those the gateway's client CA Secret already holds. A
// new CA in the CA Secret is not given to any SKR before the elected
// replica wrote it there (a certificate it signs waits); once it did, the
// follower publishes it too, and it writes nothing itself.
func TestFollowerPublishesOnlyWhatTheGatewayTrusts(t *testing.T) {
	ctx := context.Background()
	c := keeperClient(t)
	caSecret := types.NamespacedName{Namespace: keeperNS, Name: "runtime-ca"}
	clientCA := types.NamespacedName{Namespace: "istio-system", Name: "kcp-gateway-tls-cacert"}
	keeper := func() *Keeper {
		seal := &Seal{Client: c, Secret: types.NamespacedName{Namespace: "istio-system", Name: "trust-seal"}}
		k := &Keeper{
			Runtime: &Anchor{Name: "follow-test", Client: c, Secret: caSecret, Seal: seal, Log: logr.Discard(),
				Store: types.NamespacedName{Namespace: keeperNS, Name: "trust-runtime"}},
			Client: c, ClientCASecret: clientCA, Log: logr.Discard(),
		}
		k.Init(c, keeperNS)
		return k
	}
	leader, follower := keeper(), keeper()
	ca1, ca2 := pki.MustCA(t, "ca-1"), pki.MustCA(t, "ca-2")
	putSecret(t, c, caSecret.Name, map[string][]byte{"tls.crt": ca1.PEM})
	leaf1 := mustLeaf(t, ca1, "runtime-a", time.Now().Add(time.Hour))
	leaf2 := mustLeaf(t, ca2, "runtime-a", time.Now().Add(time.Hour))
	trusts := func(k *Keeper, l *pki.Leaf) bool {
		_, ok := k.RuntimeTrust(ctx, "runtime-a", l.Cert, ca1.PEM)
		return ok
	}

	follower.Follow(ctx)
	if trusts(follower, leaf1) {
		t.Fatal("the follower published a runtime CA before the elected replica wrote the client CA Secret")
	}
	for _, o := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}} {
		key := clientCA
		if _, ok := o.(*corev1.ConfigMap); ok {
			key = client.ObjectKey{Namespace: keeperNS, Name: "trust-runtime"}
		}
		if err := c.Get(ctx, key, o); !apierrors.IsNotFound(err) {
			t.Errorf("%s after the follower's pass: %v, want none (a follower writes nothing)", key, err)
		}
	}
	leader.Sync(ctx)
	follower.Follow(ctx)
	if !trusts(follower, leaf1) {
		t.Fatal("the follower does not publish the CA the elected replica keeps and the gateway trusts")
	}

	// cert-manager rotates the CA: the follower sees the new CA in the CA
	// Secret before the elected replica gave it to the gateway.
	putSecret(t, c, caSecret.Name, map[string][]byte{"tls.crt": ca2.PEM})
	follower.Follow(ctx)
	if trusts(follower, leaf2) {
		t.Error("the follower published the new CA before the gateway's client CA Secret held it")
	}
	if !trusts(follower, leaf1) {
		t.Error("the follower dropped the CA the gateway trusts")
	}
	if cur := follower.current().runtimeCurrent; cur == nil || !cur.Equal(ca1.Cert) {
		t.Error("the follower takes the new CA as current (and would ask renewals by it) before the gateway trusts it")
	}
	leader.Sync(ctx)
	follower.Follow(ctx)
	if !trusts(follower, leaf2) {
		t.Error("after the elected replica wrote the new CA to the gateway: the follower does not publish it")
	}
	if got, want := string(follower.current().runtimeBundle), string(leader.current().runtimeBundle); got != want {
		t.Errorf("the follower's runtime bundle differs from the elected replica's:\n%s\nwant\n%s", got, want)
	}
}
