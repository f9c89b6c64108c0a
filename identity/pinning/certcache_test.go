package pinning

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
)

func TestCertCacheBounds(t *testing.T) {
	var c certCache
	for i := range certCacheSize + 100 {
		var k [sha256.Size]byte
		binary.BigEndian.PutUint64(k[:], uint64(i))
		c.put(k, &certInfo{cn: fmt.Sprintf("runtime-%d", i), dnsNames: []string{"a.example.com"}})
		if got := c.get(k); got == nil || got.cn != fmt.Sprintf("runtime-%d", i) {
			t.Fatalf("entry %d not readable after put: %+v", i, got)
		}
	}
	if n := c.size(); n != certCacheSize {
		t.Fatalf("cache holds %d entries, want the bound %d", n, certCacheSize)
	}

	var big [sha256.Size]byte
	big[0] = 0xff
	names := make([]string, certCacheMaxDNSNames+1)
	for i := range names {
		names[i] = fmt.Sprintf("san-%d.example.com", i)
	}
	c.put(big, &certInfo{cn: "runtime-big", dnsNames: names})
	if c.get(big) != nil {
		t.Fatal("a certificate with many DNS SANs was cached")
	}
}
