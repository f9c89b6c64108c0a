package pki_test

import (
	"bytes"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// TestCommonNameBMP: the CN is a BMPString in the DER and decodes to the
// name given.
func TestCommonNameBMP(t *testing.T) {
	l, err := pki.MustCA(t, "bmp-ca").Issue(pki.LeafOptions{CommonName: "runtime-1", CommonNameBMP: true, DNSNames: []string{"skr1.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Cert.Subject.CommonName != "runtime-1" {
		t.Errorf("CN %q", l.Cert.Subject.CommonName)
	}
	// BMPString tag 0x1e, 18 bytes: "runtime-1" in UTF-16BE.
	if !bytes.Contains(l.Cert.RawSubject, []byte{0x1e, 18, 0, 'r', 0, 'u'}) {
		t.Errorf("no BMPString CN in %x", l.Cert.RawSubject)
	}
}
