// Package identity is the runtime identity shared by every component
// (docs/architecture.md §4.5, §4.1): what a runtime ID is, which Kyma CR a
// runtime ID names, and SAN pinning, which proves that a request comes from
// that runtime. ext-authz's gRPC server, the listener's in-process mode and
// vs-controller use it; the XFCC header grammar is in the sub-package xfcc.
//
// SAN pinning itself (Verifier, Runtime, RuntimeLookup, Identity, Denial) is
// in the sub-package pinning, which needs no client-go or controller-runtime;
// this package re-exports it under the same names. The sub-package kymastore
// holds discovery of the Kyma CRD (KymaResource), the one trimming of a
// Kyma's metadata (kymastore.Trim, also the cache transform of a
// controller-runtime cache of Kyma CRs), and a RuntimeLookup
// over a small in-memory store fed by a client-go reflector. Both it and
// NewKymaLookup (over a manager's cache, with IndexRuntimeID) apply the
// precedence below through one function, pinning.LookupInIndex: ext-authz
// uses pinning and kymastore and so links neither controller-runtime's
// client nor client-go's typed clients.
//
// It depends only on the standard library, k8s.io/apimachinery, client-go,
// controller-runtime, identity/xfcc, identity/pinning, identity/kymastore,
// api/contract and api/v1beta2 (nothing of Istio, Envoy, gRPC or
// cert-manager), so that operators importing the listener stay light.
//
// # Runtime ID and Kyma lookup
//
// The runtime ID of a Kyma CR (RuntimeIDOf) is its kyma-project.io/runtime-id
// label when set and non-empty, else its name. Looking a runtime ID up
// (NewKymaLookup) returns the Kyma whose runtime ID it is, label before name:
//
//  1. the Kyma CRs labelled with the ID: one is the answer; several are an
//     error (callers fail closed);
//  2. else the Kyma CR named with the ID, unless its label names a different
//     runtime ID: then it is that other runtime's Kyma, not this one's;
//  3. else no runtime has this ID.
//
// So a Kyma named X and labelled Y is runtime Y only, and when one Kyma is
// named X and another one is labelled X, runtime X is the labelled one.
//
// # SAN pinning
//
// A Verifier takes the client certificate from an x-forwarded-client-cert
// header, checks it and accepts it only when the Kyma CR of the runtime
// named by its CN carries, in its skr-domain annotation, one of the
// certificate's DNS SANs. Decisions, in the order they are checked:
//
//   - no header, or a header with no element: missing-client-cert;
//   - header over 32 KiB, unparsable, more than one element, no Cert (or an
//     empty one, or several; Chain is never used): malformed-xfcc;
//   - Cert not decodable to one X.509 certificate: invalid-certificate;
//   - more than contract.MaxSANs SANs (DNS + URI + IP + email): too-many-sans;
//   - expired, not yet valid, empty CN, more than one CN, or (with Roots) not chaining to
//     Roots for client authentication: invalid-certificate;
//   - source certificate given but not decodable: invalid-certificate; given
//     and not the same certificate: certificate-mismatch;
//   - no Kyma CR for the CN, or one whose deletion was asked for:
//     unknown-runtime; annotation missing or empty: domain-not-set; no DNS
//     SAN equal to it (or it is not a DNS name): san-mismatch;
//   - a certificate the Kyma's retired-certificates annotation retires
//     (issued before the runtime's current one, after the overlap; see
//     contract.Retirement): revoked.
//
// CN and DNS SANs always come from the decoded certificate, never from the
// header's DNS= or Subject= pairs.
package identity
