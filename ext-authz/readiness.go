package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
)

// DefaultKymaLostAfter is --kyma-lost-after's default.
const DefaultKymaLostAfter = time.Minute

// kymaState is what readiness reads of the Kyma store (*kymastore.Store).
type kymaState interface {
	Synced() <-chan struct{}
	FailingSince() time.Time
}

// readiness is /readyz's rule (and the gRPC health status's): ready once
// the Kyma store has synced and, with --ca-file, a CA bundle with a CA
// still valid is in use; not ready again while listing and watching the
// Kyma CRs has failed for longer than lostAfter, or once every CA of the
// bundle in use expired. bundle is nil without --ca-file.
type readiness struct {
	kymas     kymaState
	bundle    func() *filewatch.CABundle
	lostAfter time.Duration
	now       func() time.Time
}

// check returns why ext-authz is not ready, or nil.
func (r readiness) check() error {
	select {
	case <-r.kymas.Synced():
	default:
		return errors.New("the Kyma cache has not synced")
	}
	now := r.now()
	if since := r.kymas.FailingSince(); !since.IsZero() && now.Sub(since) > r.lostAfter {
		return fmt.Errorf("the Kyma CRs not listed or watched since %s (the API server fails)", since.UTC().Format(time.RFC3339))
	}
	if r.bundle != nil {
		if b := r.bundle(); b == nil {
			return errors.New("no CA bundle loaded")
		} else if !b.UsableAt(now) {
			return errors.New("every CA of --ca-file expired")
		}
	}
	return nil
}
