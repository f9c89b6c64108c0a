// Package pinning is SAN pinning (docs/architecture.md §4.5, §4.1): a Verifier
// takes the client certificate from an x-forwarded-client-cert header, checks
// it and accepts it only when the Kyma CR of the runtime named by its CN
// carries, in its skr-domain annotation, one of the certificate's DNS SANs.
// The decisions and their order are documented in package identity, which
// re-exports this package's API (identity.Verifier is pinning.Verifier).
//
// It depends only on the standard library, identity/xfcc and api/contract:
// no client-go, no controller-runtime. A binary that needs pinning but not a
// controller-runtime client (ext-authz, with identity/kymastore) imports this
// package instead of identity and so does not link or initialize
// controller-runtime's client and client-go's typed clients (about 15 MiB of
// resident memory).
package pinning
