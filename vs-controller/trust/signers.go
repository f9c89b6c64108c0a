package trust

import (
	"crypto/x509"
	"sync"
)

// signedBy is SignedBy for a runtime certificate parsed by leaf, with
// the answer per CA remembered for as long as that parse is (a new
// resourceVersion of the Secret parses it again and forgets the answers).
// The keeper scans every runtime certificate every Interval for the metrics
// and the CAs in use; checking each one's signature again cost 25 s of CPU
// in 10 minutes with 1,000 runtimes (pprof of vs-controller/bench
// BenchmarkCARotation), 2 ECDSA verifications per runtime every 5 s in
// steady state too.
func (k *Keeper) signedBy(leaf *x509.Certificate, cas []*x509.Certificate) int {
	v, _ := k.signers.LoadOrStore(leaf, &sync.Map{})
	memo := v.(*sync.Map)
	for i, ca := range cas {
		key := string(ca.Raw)
		signed, ok := memo.Load(key)
		if !ok {
			signed = SignedBy(leaf, []*x509.Certificate{ca}) == 0
			memo.Store(key, signed)
		}
		if signed.(bool) {
			return i
		}
	}
	return -1
}
