package skrclient_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

var ctx = context.Background()

// TestRuntimes: a runtime's client comes from its kubeconfig Secret in the
// Kyma namespace (the cache first, then the API reader), keyed by
// namespace and runtime ID; ForUser impersonates the user in that
// kubeconfig under a key of its own; a missing Secret is ErrNoKubeconfig.
func TestRuntimes(t *testing.T) {
	cached := fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithObjects(fakecluster.KubeconfigSecret("kcp-system", "rt-a", true)))
	api := fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithObjects(fakecluster.KubeconfigSecret("kcp-system", "rt-b", false)))
	skrA, skrB := fakecluster.New(t, clientgoscheme.Scheme), fakecluster.New(t, clientgoscheme.Scheme)
	runtimes := &fakecluster.Runtimes{}
	runtimes.Add("kcp-system/rt-a", skrA)
	runtimes.Add("kcp-system/rt-b", skrB)
	c := &skrclient.Runtimes{Reader: cached, APIReader: api, Namespace: "kcp-system", Clients: runtimes}

	if got, err := c.For(ctx, "rt-a"); err != nil || got != skrA {
		t.Errorf("rt-a: %v, %v", got, err)
	}
	if got, err := c.For(ctx, "rt-b"); err != nil || got != skrB {
		t.Errorf("rt-b (only the API reader has its Secret): %v, %v", got, err)
	}
	if c.Key("rt-a") != "kcp-system/rt-a" {
		t.Errorf("key %q", c.Key("rt-a"))
	}
	if _, err := c.For(ctx, "rt-c"); !errors.Is(err, skrclient.ErrNoKubeconfig) || !strings.Contains(err.Error(), "kcp-system/kubeconfig-rt-c") {
		t.Errorf("no Secret: %v", err)
	}

	got, err := c.ForUser(ctx, "rt-a", "alice")
	if err != nil || got != skrA {
		t.Fatalf("ForUser: %v, %v", got, err)
	}
	raw, err := clientcmd.Load(runtimes.KubeconfigOf("kcp-system/rt-a\x00alice"))
	if err != nil {
		t.Fatal(err)
	}
	if u := raw.AuthInfos[raw.Contexts[raw.CurrentContext].AuthInfo]; u.Impersonate != "alice" || u.Token != "fake" {
		t.Errorf("impersonating kubeconfig: %+v", u)
	}
	if raw, _ := clientcmd.Load(runtimes.KubeconfigOf("kcp-system/rt-a")); raw.AuthInfos["admin"].Impersonate != "" {
		t.Error("For impersonates")
	}

	cached.Fail(fakecluster.Get, "Secret", "", fakecluster.ErrUnreachable, 1)
	if _, err := c.For(ctx, "rt-a"); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("Secret unreadable: %v", err)
	}
	runtimes.Refuse("kcp-system/rt-a", errors.New("exec plugin"))
	if _, err := c.For(ctx, "rt-a"); err == nil || !strings.Contains(err.Error(), "kubeconfig Secret kubeconfig-rt-a: exec plugin") {
		t.Errorf("refused kubeconfig: %v", err)
	}
	for _, bad := range []string{"not yaml: [", "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n",
		"apiVersion: v1\nkind: Config\ncontexts:\n- name: c\n  context: {cluster: x, user: nobody}\ncurrent-context: c\n"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: skrclient.SecretName("rt-bad")},
			Data: map[string][]byte{skrclient.SecretKey: []byte(bad)}}
		r := &skrclient.Runtimes{Reader: fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithObjects(s)), Namespace: "kcp-system", Clients: runtimes}
		if _, err := r.ForUser(ctx, "rt-bad", "alice"); err == nil || !strings.Contains(err.Error(), "kubeconfig Secret kubeconfig-rt-bad") {
			t.Errorf("kubeconfig %q: %v", bad, err)
		}
	}
}

// TestRuntimesShareTheClusterMapper: the clients of one runtime's users
// (For, ForUser) share its REST mapper (NewMapper runs once per runtime),
// another runtime has its own, new credentials or Forget of the runtime
// (which drops its users' clients too) make a new one.
func TestRuntimesShareTheClusterMapper(t *testing.T) {
	secret := fakecluster.KubeconfigSecret("kcp-system", "rt-a", false)
	kcp := fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithObjects(secret, fakecluster.KubeconfigSecret("kcp-system", "rt-b", false)))
	var hosts []string
	clients := &skrclient.KubeconfigClients{Scheme: clientgoscheme.Scheme, AllowInsecure: true,
		NewMapper: func(cfg *rest.Config, _ *http.Client) (meta.RESTMapper, error) {
			hosts = append(hosts, cfg.Host)
			return skrclient.NewRESTMapper(nil), nil
		}}
	r := &skrclient.Runtimes{Reader: kcp, Namespace: "kcp-system", Clients: clients}
	admin, err := r.For(ctx, "rt-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"alice", "bob"} {
		c, err := r.ForUser(ctx, "rt-a", user)
		if err != nil {
			t.Fatal(err)
		}
		if c == admin || c.RESTMapper() != admin.RESTMapper() {
			t.Errorf("%s: a client of its own (%v) sharing the runtime's mapper (%v)", user, c != admin, c.RESTMapper() == admin.RESTMapper())
		}
	}
	bAlice, err := r.ForUser(ctx, "rt-b", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 2 || hosts[0] != "https://rt-a.example:6443" || hosts[1] != "https://rt-b.example:6443" {
		t.Fatalf("NewMapper for %v, want once per runtime", hosts)
	}
	// New credentials: a new mapper (its discovery asks with them).
	secret.Data[skrclient.SecretKey] = []byte(strings.Replace(string(secret.Data[skrclient.SecretKey]), "token: fake", "token: rotated", 1))
	if err := kcp.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	aAlice, err := r.ForUser(ctx, "rt-a", "alice")
	if err != nil {
		t.Fatal(err)
	}
	clients.Forget(r.Key("rt-b"))
	if c, err := r.ForUser(ctx, "rt-b", "alice"); err != nil {
		t.Fatal(err)
	} else if c == bAlice {
		t.Error("Forget of the runtime kept its user's client")
	}
	if c, err := r.ForUser(ctx, "rt-a", "alice"); err != nil || c != aAlice {
		t.Errorf("Forget of rt-b dropped rt-a's client (%v)", err)
	}
	if len(hosts) != 4 {
		t.Fatalf("NewMapper for %v, want once more after new credentials and after Forget", hosts)
	}
}
