package pinning

import (
	"context"
	"errors"
	"testing"
)

// mapIndex is a KymaIndex over a list of Kyma CRs.
type mapIndex struct {
	kymas []KymaRef
	err   error
}

func (m mapIndex) KymasLabelled(_ context.Context, id string) (int, KymaRef, error) {
	var n int
	var first KymaRef
	for _, k := range m.kymas {
		if k.Label == id && id != "" {
			if n == 0 {
				first = k
			}
			n++
		}
	}
	return n, first, m.err
}

func (m mapIndex) KymaNamed(_ context.Context, name string) (KymaRef, bool, error) {
	for _, k := range m.kymas {
		if k.Name == name {
			return k, true, m.err
		}
	}
	return KymaRef{}, false, m.err
}

func TestLookupInIndexPrecedence(t *testing.T) {
	idx := mapIndex{kymas: []KymaRef{
		{Name: "plain", SKRDomain: "plain.example.com"},
		{Name: "named-x", Label: "rt-1", SKRDomain: "one.example.com"}, // runtime rt-1, not named-x
		{Name: "rt-1", SKRDomain: "shadowed.example.com"},              // name rt-1 loses to the label
		{Name: "self", Label: "self", SKRDomain: "self.example.com"},
		{Name: "dup-a", Label: "dup"},
		{Name: "dup-b", Label: "dup"},
	}}
	tests := []struct {
		id        string
		wantKyma  string
		wantFound bool
		wantErr   bool
	}{
		{id: "plain", wantKyma: "plain", wantFound: true},
		{id: "rt-1", wantKyma: "named-x", wantFound: true},
		{id: "named-x"}, // named X but labelled for another runtime: not runtime X
		{id: "self", wantKyma: "self", wantFound: true},
		{id: "dup", wantErr: true}, // two Kymas claim it: fail closed
		{id: "unknown"},
		{id: ""},
	}
	for _, tt := range tests {
		rt, found, err := LookupInIndex(context.Background(), idx, tt.id)
		if (err != nil) != tt.wantErr || found != tt.wantFound || rt.KymaName != tt.wantKyma {
			t.Errorf("%q: got %+v found=%v err=%v; want Kyma %q found=%v err=%v", tt.id, rt, found, err, tt.wantKyma, tt.wantFound, tt.wantErr)
		}
		if found && rt.ID != tt.id {
			t.Errorf("%q: runtime ID %q", tt.id, rt.ID)
		}
	}
	if rt, _, _ := LookupInIndex(context.Background(), idx, "rt-1"); rt.SKRDomain != "one.example.com" {
		t.Errorf("rt-1's domain %q: must come from the labelled Kyma", rt.SKRDomain)
	}
	boom := errors.New("boom")
	if _, found, err := LookupInIndex(context.Background(), mapIndex{kymas: idx.kymas, err: boom}, "plain"); !errors.Is(err, boom) || found {
		t.Errorf("an index error must fail the lookup: found=%v err=%v", found, err)
	}
}
