package certificates_test

import (
	"slices"
	"strings"
	"testing"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
)

func TestDesired(t *testing.T) {
	kyma := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: "kyma-a", UID: "u1"}}
	issuer := cmmeta.IssuerReference{Name: "runtime-ca", Kind: "Issuer"}
	c := certificates.Desired(kyma, "r1", "skr.example", issuer, []string{"svc.a", "", "skr.example", "svc.a", "localhost"})
	if c.Name != "r1-webhook-tls" || c.Namespace != "kcp-system" || c.Spec.SecretName != c.Name {
		t.Fatalf("name %s/%s secret %s", c.Namespace, c.Name, c.Spec.SecretName)
	}
	if c.Spec.SecretTemplate == nil || c.Spec.SecretTemplate.Labels[contract.LabelPartOf] != contract.PartOf {
		t.Fatalf("secretTemplate %+v: the Secret would not be in vs-controller's cache", c.Spec.SecretTemplate)
	}
	if c.Spec.CommonName != "r1" || c.Spec.IssuerRef != issuer {
		t.Fatalf("CN %q issuer %+v", c.Spec.CommonName, c.Spec.IssuerRef)
	}
	if want := []string{"skr.example", "svc.a", "localhost"}; !slices.Equal(c.Spec.DNSNames, want) {
		t.Fatalf("DNS names %v, want %v", c.Spec.DNSNames, want)
	}
	owner := metav1.GetControllerOf(c)
	if owner == nil || owner.Kind != v1beta2.KymaGroupVersionKind.Kind || owner.Name != "kyma-a" || owner.UID != "u1" {
		t.Fatalf("owner %+v", owner)
	}
	if !slices.Contains(c.Spec.Usages, certmanagerv1.UsageClientAuth) || !slices.Contains(c.Spec.Usages, certmanagerv1.UsageServerAuth) {
		t.Fatalf("usages %v", c.Spec.Usages)
	}
	if k := c.Spec.PrivateKey; k == nil || k.Algorithm != certmanagerv1.ECDSAKeyAlgorithm || k.Size != 256 || k.RotationPolicy != certmanagerv1.RotationPolicyAlways {
		t.Fatalf("private key %+v: want ECDSA P-256, rotated at every issuance (cert-manager's default is RSA 2048)", k)
	}
}

func TestValidRuntimeID(t *testing.T) {
	for id, ok := range map[string]bool{
		"c3d4e5f6": true, strings.Repeat("a", certificates.MaxCommonNameLength): true,
		strings.Repeat("a", certificates.MaxCommonNameLength+1): false, "Upper": false, "a/b": false, "": false,
	} {
		if err := certificates.ValidRuntimeID(id); (err == nil) != ok {
			t.Errorf("%q: %v", id, err)
		}
	}
}

func TestIssued(t *testing.T) {
	full := map[string][]byte{"ca.crt": []byte("ca"), "tls.crt": []byte("crt"), "tls.key": []byte("key")}
	kcp := fake.NewClientBuilder().WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: certificates.Name("r1")}, Data: full},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: certificates.Name("r2")}, Data: map[string][]byte{"tls.crt": []byte("crt")}},
	).Build()
	tls, err := certificates.Issued(t.Context(), kcp, "kcp-system", "r1")
	if err != nil || tls == nil || string(tls.CA) != "ca" || string(tls.Cert) != "crt" || string(tls.Key) != "key" {
		t.Fatalf("r1: %+v %v", tls, err)
	}
	for _, id := range []string{"r2", "r3"} { // incomplete, missing
		if tls, err := certificates.Issued(t.Context(), kcp, "kcp-system", id); tls != nil || err != nil {
			t.Fatalf("%s: %+v %v", id, tls, err)
		}
	}
}

func TestRuntimeIDOfSecret(t *testing.T) {
	if id, ok := certificates.RuntimeIDOfSecret(certificates.Name("r1")); !ok || id != "r1" {
		t.Fatalf("%q %t", id, ok)
	}
	for _, name := range []string{"-webhook-tls", "kubeconfig-r1", "r1-webhook-tls-x"} {
		if id, ok := certificates.RuntimeIDOfSecret(name); ok {
			t.Errorf("%s: %q", name, id)
		}
	}
}
