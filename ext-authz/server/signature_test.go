package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

// TestCheckAllowSigned: with a Signer, an allow carries the identity
// signature over the runtime, SKR domain, method and path ext-authz saw,
// overwriting one the client sent; without one, a client's signature
// header is removed.
func TestCheckAllowSigned(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := startWith(t, func(*prometheus.Registry) server.Config {
		return server.Config{Signer: assertion.NewSigner(priv, 0, nil)}
	})
	req := envoyRequest(t, "example_allowed_request.json", map[string]string{
		contract.HeaderXFCC:              xfccOf(f.good),
		contract.HeaderIdentitySignature: "v1;forged",
	})
	resp, err := f.client.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ok := resp.GetOkResponse()
	if ok == nil {
		t.Fatalf("not allowed: %v", resp)
	}
	got := headerMap(ok.GetHeaders())
	sig := got[contract.HeaderIdentitySignature]
	if len(got) != 3 || sig == "" {
		t.Fatalf("headers %v: no identity signature", got)
	}
	if slices.Contains(ok.GetHeadersToRemove(), contract.HeaderIdentitySignature) {
		t.Errorf("the signature ext-authz sets is also removed: %v", ok.GetHeadersToRemove())
	}
	http := req.GetAttributes().GetRequest().GetHttp()
	v := assertion.NewVerifier([]ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}, nil)
	claims := assertion.Claims{RuntimeID: "runtime-1", SKRDomain: "skr1.example.com", Method: http.GetMethod(), Path: http.GetPath()}
	if err := v.Verify(sig, claims); err != nil {
		t.Errorf("signature of the allow does not verify: %v", err)
	}
	claims.Path = "/v2/other-operator/event"
	if err := v.Verify(sig, claims); err == nil {
		t.Error("signature verifies for another path")
	}

	// No Signer: the client's header never reaches the upstream.
	f = start(t)
	resp, err = f.client.Check(context.Background(), envoyRequest(t, "example_allowed_request.json", map[string]string{
		contract.HeaderXFCC:              xfccOf(f.good),
		contract.HeaderIdentitySignature: "v1;forged",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if h := headerMap(resp.GetOkResponse().GetHeaders()); len(h) != 2 || !slices.Contains(resp.GetOkResponse().GetHeadersToRemove(), contract.HeaderIdentitySignature) {
		t.Errorf("unsigned allow: headers %v, removed %v", h, resp.GetOkResponse().GetHeadersToRemove())
	}
}

// BenchmarkIdentitySignature is what signing the identity costs per allow
// (docs/performance.md, "The identity signature"): the whole in-process
// Check unsigned and signed with Ed25519, and the primitives that were
// weighed against each other — HMAC-SHA256 (a shared key: every verifier
// could mint), Ed25519 and ECDSA P-256 signing and verifying — over a
// message of the size ext-authz signs. Besides ns/op (wall clock) each
// reports cpu-ns/op, the process's CPU time (user + system, getrusage) per
// operation, setup included: on a machine shared with other work the wall
// clock counts the time the benchmark waited for a core, its CPU time does
// not.
func BenchmarkIdentitySignature(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("check/unsigned", cpuPerOp(func(b *testing.B) { benchmarkCheckInProcess(b, false, server.Config{}) }))
	b.Run("check/ed25519", cpuPerOp(func(b *testing.B) {
		benchmarkCheckInProcess(b, false, server.Config{Signer: assertion.NewSigner(priv, 0, nil)})
	}))
	msg := []byte("runtime-watcher identity v1\x00\x00\x00\x00\x69\x29\x4a\x00runtime-1skr-1.example.comPOST/v2/example-operator/event" +
		"________") // ~100 bytes, as the length-prefixed claims
	b.Run("hmac-sha256", cpuPerOp(func(b *testing.B) {
		key := make([]byte, 32)
		for b.Loop() {
			m := hmac.New(sha256.New, key)
			m.Write(msg)
			m.Sum(nil)
		}
	}))
	sig := ed25519.Sign(priv, msg)
	b.Run("ed25519/sign", cpuPerOp(func(b *testing.B) {
		for b.Loop() {
			ed25519.Sign(priv, msg)
		}
	}))
	b.Run("ed25519/verify", cpuPerOp(func(b *testing.B) {
		pub := priv.Public().(ed25519.PublicKey)
		for b.Loop() {
			if !ed25519.Verify(pub, msg, sig) {
				b.Fatal("does not verify")
			}
		}
	}))
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	digest := sha256.Sum256(msg)
	b.Run("ecdsa-p256/sign", cpuPerOp(func(b *testing.B) {
		for b.Loop() {
			if _, err := ecdsa.SignASN1(rand.Reader, ec, digest[:]); err != nil {
				b.Fatal(err)
			}
		}
	}))
	ecSig, err := ecdsa.SignASN1(rand.Reader, ec, digest[:])
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ecdsa-p256/verify", cpuPerOp(func(b *testing.B) {
		for b.Loop() {
			if !ecdsa.VerifyASN1(&ec.PublicKey, digest[:], ecSig) {
				b.Fatal("does not verify")
			}
		}
	}))
}

// cpuPerOp runs f and reports the process's CPU time per operation
// (cpu-ns/op) besides Go's wall-clock ns/op.
func cpuPerOp(f func(b *testing.B)) func(b *testing.B) {
	return func(b *testing.B) {
		before := cpuTime(b)
		f(b)
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
