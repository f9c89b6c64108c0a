package pinning

import (
	"context"
	"fmt"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// KymaRef is one Kyma CR as the runtime lookup reads it.
type KymaRef struct {
	Name      string
	Label     string // kyma-project.io/runtime-id; "" when missing or empty
	SKRDomain string // raw value of the skr-domain annotation; "" when not set
	Retired   Retirement
	Deleting  bool // the Kyma's deletion was asked for
	// Class is the value of the label that names the runtime's class for
	// ext-authz's rate limits (kymastore.Store.ClassLabel); "" when none.
	Class string
}

// KymaIndex finds the Kyma CRs of one namespace by runtime-id label and by
// name; LookupInIndex applies the lookup's precedence over it. An index
// answers "none" for a runtime ID no Kyma CR can carry as label or name.
type KymaIndex interface {
	// KymasLabelled returns how many Kyma CRs carry the label
	// kyma-project.io/runtime-id=id, and the first of them.
	KymasLabelled(ctx context.Context, id string) (n int, first KymaRef, err error)
	// KymaNamed returns the Kyma CR named name.
	KymaNamed(ctx context.Context, name string) (k KymaRef, found bool, err error)
}

// LookupInIndex finds the Kyma CR of a runtime ID, label before name. It is
// the one implementation of the lookup's precedence (docs/architecture.md
// §3.4) that every RuntimeLookup of this project uses (identity.NewKymaLookup
// over a controller-runtime reader, identity/kymastore in ext-authz):
//
//  1. the Kyma CRs labelled kyma-project.io/runtime-id=<id>: one is the
//     answer; several are an error, so callers fail closed;
//  2. else the Kyma CR named <id>, unless it carries a runtime-id label
//     naming another runtime (it is that runtime's Kyma);
//  3. else the runtime is unknown (found=false).
func LookupInIndex(ctx context.Context, idx KymaIndex, runtimeID string) (Runtime, bool, error) {
	n, k, err := idx.KymasLabelled(ctx, runtimeID)
	switch {
	case err != nil:
		return Runtime{}, false, err
	case n > 1:
		return Runtime{}, false, fmt.Errorf("%d Kyma CRs carry label %s=%s", n, contract.LabelRuntimeID, runtimeID)
	case n == 1:
		return Runtime{ID: runtimeID, KymaName: k.Name, SKRDomain: k.SKRDomain, Retired: k.Retired, Deleting: k.Deleting, Class: k.Class}, true, nil
	}
	k, found, err := idx.KymaNamed(ctx, runtimeID)
	if err != nil || !found || k.Label != "" && k.Label != runtimeID {
		return Runtime{}, false, err // unknown, or labelled for another runtime
	}
	return Runtime{ID: runtimeID, KymaName: k.Name, SKRDomain: k.SKRDomain, Retired: k.Retired, Deleting: k.Deleting, Class: k.Class}, true, nil
}
