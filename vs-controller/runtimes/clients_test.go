package runtimes_test

import (
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
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
		{"too large", make([]byte, runtimes.MaxKubeconfigBytes+1), "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := runtimes.RESTConfig(tc.data)
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
	k := &runtimes.KubeconfigClients{}
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
