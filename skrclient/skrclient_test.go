package skrclient_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

const kubeconfigTmpl = `apiVersion: v1
kind: Config
clusters:
- name: skr
  cluster:
    server: https://127.0.0.1:6443
    %CLUSTER%
users:
- name: admin
  user:
    %USER%
contexts:
- name: skr
  context: {cluster: skr, user: admin}
current-context: skr
`

func kubeconfig(cluster, user string) []byte {
	s := strings.ReplaceAll(kubeconfigTmpl, "%CLUSTER%", cluster)
	return []byte(strings.ReplaceAll(s, "%USER%", user))
}

func TestRESTConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   []byte
		errSub string
	}{
		{"inline token", kubeconfig("insecure-skip-tls-verify: true", "token: abc"), ""},
		{"exec plugin", kubeconfig("insecure-skip-tls-verify: true", "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}"), "exec"},
		{"auth provider", kubeconfig("insecure-skip-tls-verify: true", "auth-provider: {name: oidc}"), "auth provider"},
		{"client cert file", kubeconfig("insecure-skip-tls-verify: true", "client-certificate: /etc/passwd"), "local files"},
		{"token file", kubeconfig("insecure-skip-tls-verify: true", "tokenFile: /var/run/secrets/token"), "local files"},
		{"CA file", kubeconfig("certificate-authority: /etc/ssl/ca.pem", "token: abc"), "CA file"},
		{"empty", nil, "empty"},
		{"garbage", []byte("{{{"), "parse"},
		{"too large", make([]byte, skrclient.MaxKubeconfigBytes+1), "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := skrclient.RESTConfig(tc.data)
			if tc.errSub == "" {
				if err != nil || cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "abc" {
					t.Fatalf("cfg %+v err %v", cfg, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Fatalf("err %v, want one containing %q", err, tc.errSub)
			}
		})
	}
}

func TestKubeconfigClientsCache(t *testing.T) {
	k := newClients()
	a := kubeconfig("insecure-skip-tls-verify: true", "token: abc")
	c1, err := k.For(t.Context(), "kcp-system/r1", a)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := k.For(t.Context(), "kcp-system/r1", a)
	if c1 != c2 {
		t.Fatal("same kubeconfig built a new client")
	}
	c3, _ := k.For(t.Context(), "kcp-system/r1", kubeconfig("insecure-skip-tls-verify: true", "token: rotated"))
	if c3 == c1 {
		t.Fatal("changed kubeconfig reused the old client")
	}
	k.Forget("kcp-system/r1")
	c4, _ := k.For(t.Context(), "kcp-system/r1", kubeconfig("insecure-skip-tls-verify: true", "token: rotated"))
	if c4 == c3 {
		t.Fatal("Forget kept the client")
	}
}

// An SKR kubeconfig that skips TLS verification is refused with ErrInsecure
// unless AllowInsecure (vs-controller's --allow-insecure-skr).
func TestKubeconfigClientsRefuseInsecure(t *testing.T) {
	k := newClients()
	k.AllowInsecure = false
	insecure := kubeconfig("insecure-skip-tls-verify: true", "token: abc")
	if _, err := k.For(t.Context(), "kcp-system/r1", insecure); !errors.Is(err, skrclient.ErrInsecure) {
		t.Fatalf("err %v, want ErrInsecure", err)
	}
	k.AllowInsecure = true
	if _, err := k.For(t.Context(), "kcp-system/r1", insecure); err != nil {
		t.Fatalf("AllowInsecure: %v", err)
	}
}

// An SKR kubeconfig whose server is http:// (or a bare host without any
// TLS setting, which client-go reaches over http) is refused with
// ErrPlainHTTP unless AllowInsecure.
func TestKubeconfigClientsRefusePlainHTTP(t *testing.T) {
	for _, server := range []string{"http://127.0.0.1:6443", "127.0.0.1:6443"} {
		plain := []byte(strings.ReplaceAll(string(kubeconfig("", "token: abc")), "https://127.0.0.1:6443", server))
		k := newClients()
		k.AllowInsecure = false
		if _, err := k.For(t.Context(), "kcp-system/r1", plain); !errors.Is(err, skrclient.ErrPlainHTTP) {
			t.Fatalf("%s: err %v, want ErrPlainHTTP", server, err)
		}
		k.AllowInsecure = true
		if _, err := k.For(t.Context(), "kcp-system/r1", plain); err != nil {
			t.Fatalf("%s with AllowInsecure: %v", server, err)
		}
	}
	ca, err := pki.NewCA("skr API server CA")
	if err != nil {
		t.Fatal(err)
	}
	k := newClients()
	k.AllowInsecure = false
	if _, err := k.For(t.Context(), "kcp-system/r1", kubeconfig("certificate-authority-data: "+base64.StdEncoding.EncodeToString(ca.PEM), "token: abc")); err != nil {
		t.Fatalf("https with a CA: %v", err)
	}
}

// newClients knows Secrets only and accepts the insecure test kubeconfigs.
func newClients() *skrclient.KubeconfigClients {
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	return &skrclient.KubeconfigClients{
		AllowInsecure: true,
		Scheme:        scheme,
		Mapper:        skrclient.NewRESTMapper(map[schema.GroupVersionKind]bool{corev1.SchemeGroupVersion.WithKind("Secret"): false}),
	}
}

func TestKubeconfigClientsNeedSchemeAndMapper(t *testing.T) {
	_, err := (&skrclient.KubeconfigClients{}).For(t.Context(), "r1", kubeconfig("insecure-skip-tls-verify: true", "token: abc"))
	if err == nil {
		t.Fatal("a client without scheme and mapper was built")
	}
}

func TestRESTMapper(t *testing.T) {
	m := skrclient.NewRESTMapper(map[schema.GroupVersionKind]bool{
		corev1.SchemeGroupVersion.WithKind("Namespace"): true,
		corev1.SchemeGroupVersion.WithKind("Secret"):    false,
	})
	for kind, want := range map[string]string{"Namespace": "root", "Secret": "namespace"} {
		gvk := corev1.SchemeGroupVersion.WithKind(kind)
		mapping, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(mapping.Scope.Name()); got != want {
			t.Errorf("%s: scope %s, want %s", kind, got, want)
		}
	}
	if _, err := m.RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "v1"); err == nil {
		t.Error("an unlisted kind was mapped")
	}
}

func TestKubeconfig(t *testing.T) {
	kcp := fake.NewClientBuilder().WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: "kubeconfig-r1"}, Data: map[string][]byte{"config": []byte("kc")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "kubeconfig-r2"}, Data: map[string][]byte{"config": []byte("kc")}},
	).Build()
	got, err := skrclient.Kubeconfig(t.Context(), kcp, "kcp-system", "r1")
	if err != nil || string(got) != "kc" {
		t.Fatalf("r1: %q, %v", got, err)
	}
	got, err = skrclient.Kubeconfig(t.Context(), kcp, "kcp-system", "r2")
	if err != nil || got != nil {
		t.Fatalf("r2 (other namespace): %q, %v", got, err)
	}
}

func TestRuntimeIDOfSecret(t *testing.T) {
	for name, want := range map[string]string{"kubeconfig-r1": "r1", "kubeconfig-": "", "r1-webhook-tls": "", "config": ""} {
		id, ok := skrclient.RuntimeIDOfSecret(name)
		if id != want && ok || ok != (want != "") {
			t.Errorf("%s: %q %t, want %q", name, id, ok, want)
		}
		if ok && skrclient.SecretName(id) != name {
			t.Errorf("%s: SecretName(%q) = %q", name, id, skrclient.SecretName(id))
		}
	}
}

func TestKubeconfigClientsNewMapperPerRuntime(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	var hosts []string
	k := &skrclient.KubeconfigClients{Scheme: scheme, AllowInsecure: true, NewMapper: func(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
		if hc == nil {
			t.Error("NewMapper got no HTTP client")
		}
		hosts = append(hosts, cfg.Host)
		return skrclient.NewRESTMapper(nil), nil
	}}
	a := kubeconfig("insecure-skip-tls-verify: true", "token: abc")
	c1, err := k.For(t.Context(), "r1", a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.For(t.Context(), "r1", a); err != nil {
		t.Fatal(err)
	}
	if _, err := k.For(t.Context(), "r2", a); err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 2 || hosts[0] != "https://127.0.0.1:6443" {
		t.Fatalf("NewMapper calls: %v, want one per runtime", hosts)
	}
	if c1.RESTMapper() == nil {
		t.Fatal("client without the mapper")
	}
	k.NewMapper = func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return nil, errors.New("boom") }
	if _, err := k.For(t.Context(), "r3", a); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("mapper error not returned: %v", err)
	}
}

// Text a runtime controls is cut to MaxText bytes, at a rune boundary; an
// error cut so still matches errors.Is.
func TestBounded(t *testing.T) {
	if got := skrclient.Bounded("short"); got != "short" {
		t.Errorf("Bounded(short) = %q", got)
	}
	long := strings.Repeat("ä", skrclient.MaxText)
	got := skrclient.Bounded(long)
	if len(got) > skrclient.MaxText || !utf8.ValidString(got) || !strings.HasSuffix(got, "(cut)") {
		t.Errorf("Bounded(%d bytes) = %d bytes, valid UTF-8 %t: %q", len(long), len(got), utf8.ValidString(got), got[len(got)-20:])
	}
	err := skrclient.BoundedError(fmt.Errorf("%s: %w", long, skrclient.ErrInsecure))
	if len(err.Error()) > skrclient.MaxText || !errors.Is(err, skrclient.ErrInsecure) {
		t.Errorf("BoundedError: %d bytes, Is(ErrInsecure) %t", len(err.Error()), errors.Is(err, skrclient.ErrInsecure))
	}
	if skrclient.BoundedError(nil) != nil {
		t.Error("BoundedError(nil) is not nil")
	}
}

// FuzzBounded: whatever a runtime sends, Bounded keeps at most MaxText
// bytes and valid UTF-8 valid.
func FuzzBounded(f *testing.F) {
	f.Add("x")
	f.Add(strings.Repeat("€", 700))
	f.Fuzz(func(t *testing.T, s string) {
		got := skrclient.Bounded(s)
		if len(got) > skrclient.MaxText {
			t.Errorf("%d bytes", len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Error("valid UTF-8 became invalid")
		}
	})
}

// TestDynamicRESTMapperAsksPerGroup: the mapper's discovery asks for the
// per-group documents (never the aggregated one, which would make it hold
// every resource of the cluster) and learns only the groups it is asked
// about. Against a real API server: module-sync/mirror's and syncitems'
// integration tests (CRDs installed later, preferred versions).
func TestDynamicRESTMapperAsksPerGroup(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = r.Header.Get("Accept")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"]}`)
		case "/apis":
			fmt.Fprint(w, `{"kind":"APIGroupList","groups":[{"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}],"preferredVersion":{"groupVersion":"apps/v1","version":"v1"}}]}`)
		case "/api/v1":
			fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get"]}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	m, err := skrclient.DynamicRESTMapper(&rest.Config{Host: srv.URL}, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for path, accept := range asked {
		if strings.Contains(accept, "apidiscovery") {
			t.Errorf("%s asked with Accept %q", path, accept)
		}
	}
	if _, ok := asked["/apis/apps/v1"]; ok || asked["/api/v1"] == "" {
		t.Errorf("asked %v: want the core group's resources only", asked)
	}
}
