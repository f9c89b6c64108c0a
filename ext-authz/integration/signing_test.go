package integration_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/volume"
)

// The binary signs the identity of every allow with the key of its
// mounted file, and follows a new key once its grace passed
// (docs/security.md, "Routes cannot speak for a runtime").
var _ = Describe("ext-authz --identity-signing-key-file", func() {
	It("signs every allow over the runtime, domain, method and path with the mounted key, and the renewed key after its grace", func() {
		createKyma(kymaNamespace, "runtime-signed", "skr-signed.example.com", nil)
		newKey := func() (ed25519.PublicKey, []byte) {
			GinkgoHelper()
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			Expect(err).NotTo(HaveOccurred())
			der, err := x509.MarshalPKCS8PrivateKey(priv)
			Expect(err).NotTo(HaveOccurred())
			return pub, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
		}
		pubA, keyA := newKey()
		pubB, keyB := newKey()
		vol, err := volume.New(filepath.Join(GinkgoT().TempDir(), "identity"))
		Expect(err).NotTo(HaveOccurred())
		Expect(vol.Write(map[string][]byte{"tls.key": keyA})).To(Succeed())
		p := startExtAuthz("--kyma-namespace="+kymaNamespace, "--identity-signing-key-file="+vol.File("tls.key"), "--identity-key-grace=1s")
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		authz := authv3.NewAuthorizationClient(conn)

		leaf := issue("runtime-signed", "skr-signed.example.com")
		req := extauthz.CheckRequest("signed-operator", map[string]string{contract.HeaderXFCC: xfccOf(leaf),
			contract.HeaderIdentitySignature: "v1;forged-by-the-client"})
		claims := assertion.Claims{RuntimeID: "runtime-signed", SKRDomain: "skr-signed.example.com", Method: "POST", Path: contract.EventPath("signed-operator")}
		signature := func() string {
			resp, err := authz.Check(context.Background(), req)
			Expect(err).NotTo(HaveOccurred())
			d := decisionOf(resp)
			Expect(d.GRPCCode).To(BeZero(), "allowed: %v", resp)
			return d.Headers[contract.HeaderIdentitySignature]
		}
		onlyA := assertion.NewVerifier([]ed25519.PublicKey{pubA}, nil)
		onlyB := assertion.NewVerifier([]ed25519.PublicKey{pubB}, nil)
		Expect(onlyA.Verify(signature(), claims)).To(Succeed())
		other := claims
		other.Path = "/tenant/operator"
		Expect(onlyA.Verify(signature(), other)).NotTo(Succeed(), "the signature is bound to the path")

		By("the key file renewed: key B signs once the grace (1s) has passed")
		Expect(vol.Write(map[string][]byte{"tls.key": keyB})).To(Succeed())
		Eventually(func() error { return onlyB.Verify(signature(), claims) }).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(onlyA.Verify(signature(), claims)).NotTo(Succeed())
	})
})
