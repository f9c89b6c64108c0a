package contract_test

import (
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// FuzzParseRetirement: any annotation value is read without panicking,
// bounded, and what parses writes back to the same retirement.
func FuzzParseRetirement(f *testing.F) {
	r := contract.Retirement{IssuedBefore: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), From: time.Date(2026, 1, 2, 3, 14, 5, 6, time.UTC)}
	f.Add(r.String())
	r.Always = r.IssuedBefore.Add(-time.Hour)
	f.Add(r.String())
	for _, s := range []string{"", "{}", "null", `{"issuedBefore":"x"}`, `{"from":"9999-12-31T23:59:59Z"}`, `[1]`, `{"issuedBefore":"2026-01-02T03:04:05+14:00"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := contract.ParseRetirement(v)
		if err != nil {
			if got != (contract.Retirement{}) {
				t.Fatalf("error %v with a retirement %+v", err, got)
			}
			return
		}
		if len(v) > 512 {
			t.Fatalf("%d bytes accepted", len(v))
		}
		again, err := contract.ParseRetirement(got.String())
		if err != nil || !again.IssuedBefore.Equal(got.IssuedBefore) || !again.From.Equal(got.From) || !again.Always.Equal(got.Always) {
			t.Fatalf("%q: %+v written as %s reads back as %+v, %v", v, got, got, again, err)
		}
	})
}
