package skrclient_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

// recordingClients is a ClusterClients that records what it was asked for.
type recordingClients struct {
	keys        []string
	kubeconfigs [][]byte
}

func (r *recordingClients) For(_ context.Context, key string, kubeconfig []byte) (client.Client, error) {
	r.keys = append(r.keys, key)
	r.kubeconfigs = append(r.kubeconfigs, kubeconfig)
	return fake.NewClientBuilder().Build(), nil
}

func (r *recordingClients) Forget(string) {}

func secret(id string, data []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: skrclient.SecretName(id)},
		Data: map[string][]byte{skrclient.SecretKey: data}}
}

func TestRuntimes(t *testing.T) {
	kc := kubeconfig("insecure-skip-tls-verify: true", "token: abc")
	clients := &recordingClients{}
	r := &skrclient.Runtimes{
		Reader:    fake.NewClientBuilder().WithObjects(secret("cached", kc)).Build(),
		APIReader: fake.NewClientBuilder().WithObjects(secret("uncached", kc)).Build(),
		Namespace: "kcp-system", Clients: clients,
	}
	ctx := context.Background()
	if _, err := r.For(ctx, "missing"); !errors.Is(err, skrclient.ErrNoKubeconfig) {
		t.Fatalf("a runtime without a kubeconfig Secret: %v, want ErrNoKubeconfig", err)
	}
	for _, id := range []string{"cached", "uncached"} { // the APIReader is asked when the Reader lacks it
		if _, err := r.For(ctx, id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if _, err := r.ForUser(ctx, "cached", "module:sample"); err != nil {
		t.Fatal(err)
	}
	want := []string{"kcp-system/cached", "kcp-system/uncached", "kcp-system/cached\x00module:sample"}
	if len(clients.keys) != len(want) {
		t.Fatalf("keys %q, want %q", clients.keys, want)
	}
	for i := range want {
		if clients.keys[i] != want[i] {
			t.Errorf("key %d is %q, want %q", i, clients.keys[i], want[i])
		}
	}
	if r.Key("cached") != want[0] {
		t.Errorf("Key %q", r.Key("cached"))
	}
	raw, err := clientcmd.Load(clients.kubeconfigs[2])
	if err != nil {
		t.Fatal(err)
	}
	if u := raw.AuthInfos[raw.Contexts[raw.CurrentContext].AuthInfo]; u.Impersonate != "module:sample" || u.Token != "abc" {
		t.Errorf("impersonating kubeconfig: user %+v, want the kubeconfig's token acting as module:sample", u)
	}
	if raw, _ := clientcmd.Load(clients.kubeconfigs[0]); raw.AuthInfos["admin"].Impersonate != "" {
		t.Error("For impersonates")
	}

	r.Reader = fake.NewClientBuilder().WithObjects(secret("broken", []byte("current-context: nowhere"))).Build()
	if _, err := r.ForUser(ctx, "broken", "module:sample"); err == nil {
		t.Error("ForUser accepted a kubeconfig without its current context")
	}
}
