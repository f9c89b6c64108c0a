package kymastore

import (
	"context"

	toolscache "k8s.io/client-go/tools/cache"
)

// RunListWatch runs the store's reflector on lw (Run builds lw from a
// rest.Config).
func (s *Store) RunListWatch(ctx context.Context, lw *toolscache.ListWatch) error {
	return s.run(ctx, lw, "test")
}

// TrimKeeping is ListWatch's trimming with the labels it keeps besides
// the runtime-id label (the Store's ClassLabel).
var TrimKeeping = trim
