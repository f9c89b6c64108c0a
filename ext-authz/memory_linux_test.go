package main

import "testing"

func TestReleaseStartupPages(t *testing.T) {
	n, err := releaseStartupPages()
	if err != nil {
		t.Fatalf("MADV_PAGEOUT (Linux 5.4+): %v", err)
	}
	if n <= 0 {
		t.Fatalf("released %d bytes of the test binary's read-only mappings", n)
	}
}
