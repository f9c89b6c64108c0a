package gateway

import (
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"

	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// rbacRequest is what RBAC matchers read of a request.
type rbacRequest struct {
	path     string // without the query
	headers  map[string]string
	destPort uint32
	peer     *x509.Certificate
}

// rbacRule is a compiled Envoy RBAC Permission or Principal: the
// combinators both messages share (any, and, or, not) or one leaf test of
// the request (a path, header, destination port or authenticated peer).
type rbacRule struct {
	any     bool
	and, or []*rbacRule
	not     *rbacRule
	leaf    func(*rbacRequest) bool
}

type headerMatch struct {
	name    string
	present bool
	value   *stringMatch
	invert  bool
}

type stringMatch struct {
	exact, prefix, suffix, contains string
	regex                           *regexp.Regexp
	ignoreCase                      bool
	kind                            string
}

func compileStringMatch(m *matcherv3.StringMatcher) (stringMatch, error) {
	if err := onlyFields(m, "exact", "prefix", "suffix", "contains", "safe_regex", "ignore_case"); err != nil {
		return stringMatch{}, err
	}
	out := stringMatch{ignoreCase: m.GetIgnoreCase()}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		out.kind, out.exact = "exact", p.Exact
	case *matcherv3.StringMatcher_Prefix:
		out.kind, out.prefix = "prefix", p.Prefix
	case *matcherv3.StringMatcher_Suffix:
		out.kind, out.suffix = "suffix", p.Suffix
	case *matcherv3.StringMatcher_Contains:
		out.kind, out.contains = "contains", p.Contains
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return stringMatch{}, err
		}
		out.kind, out.regex = "regex", re
	default:
		return stringMatch{}, errors.New("string matcher without a pattern")
	}
	return out, nil
}

func (m stringMatch) match(v string) bool {
	fold := func(s string) string {
		if m.ignoreCase {
			return strings.ToLower(s)
		}
		return s
	}
	switch m.kind {
	case "exact":
		return fold(v) == fold(m.exact)
	case "prefix":
		return strings.HasPrefix(fold(v), fold(m.prefix))
	case "suffix":
		return strings.HasSuffix(fold(v), fold(m.suffix))
	case "contains":
		return strings.Contains(fold(v), fold(m.contains))
	case "regex":
		return m.regex.MatchString(v)
	}
	return false
}

func compileRBAC(r *rbacconfigv3.RBAC) (*rbacEngine, error) {
	if r == nil {
		return nil, errors.New("no rules")
	}
	if err := onlyFields(r, "action", "policies"); err != nil {
		return nil, err
	}
	out := &rbacEngine{action: r.GetAction()}
	for _, name := range sortedKeys(r.GetPolicies()) {
		p := r.GetPolicies()[name]
		if err := onlyFields(p, "permissions", "principals"); err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
		cp := rbacPolicy{name: name}
		var err error
		if cp.permissions, err = compileRules(p.GetPermissions(), compilePermission); err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
		if cp.principals, err = compileRules(p.GetPrincipals(), compilePrincipal); err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
		out.policies = append(out.policies, cp)
	}
	return out, nil
}

func compilePermission(p *rbacconfigv3.Permission) (*rbacRule, error) {
	out := &rbacRule{}
	var err error
	switch r := p.GetRule().(type) {
	case *rbacconfigv3.Permission_Any:
		out.any = r.Any
	case *rbacconfigv3.Permission_AndRules:
		out.and, err = compileRules(r.AndRules.GetRules(), compilePermission)
	case *rbacconfigv3.Permission_OrRules:
		out.or, err = compileRules(r.OrRules.GetRules(), compilePermission)
	case *rbacconfigv3.Permission_NotRule:
		out.not, err = compilePermission(r.NotRule)
	case *rbacconfigv3.Permission_UrlPath:
		if err := onlyFields(r.UrlPath, "path"); err != nil {
			return nil, err
		}
		var sm stringMatch
		sm, err = compileStringMatch(r.UrlPath.GetPath())
		out.leaf = func(r *rbacRequest) bool { return sm.match(r.path) }
	case *rbacconfigv3.Permission_Header:
		var h *headerMatch
		h, err = compileHeaderMatch(r.Header)
		out.leaf = h.match
	case *rbacconfigv3.Permission_DestinationPort:
		if port := r.DestinationPort; port != 0 { // port 0 matches nothing
			out.leaf = func(r *rbacRequest) bool { return r.destPort == port }
		}
	default:
		return nil, fmt.Errorf("permission %T not implemented", p.GetRule())
	}
	return out, err
}

func compilePrincipal(p *rbacconfigv3.Principal) (*rbacRule, error) {
	out := &rbacRule{}
	var err error
	switch r := p.GetIdentifier().(type) {
	case *rbacconfigv3.Principal_Any:
		out.any = r.Any
	case *rbacconfigv3.Principal_AndIds:
		out.and, err = compileRules(r.AndIds.GetIds(), compilePrincipal)
	case *rbacconfigv3.Principal_OrIds:
		out.or, err = compileRules(r.OrIds.GetIds(), compilePrincipal)
	case *rbacconfigv3.Principal_NotId:
		out.not, err = compilePrincipal(r.NotId)
	case *rbacconfigv3.Principal_Authenticated_:
		// Without a principal name: any verified peer.
		var name *stringMatch
		if pn := r.Authenticated.GetPrincipalName(); pn != nil {
			var sm stringMatch
			sm, err = compileStringMatch(pn)
			name = &sm
		}
		out.leaf = func(r *rbacRequest) bool {
			return r.peer != nil && (name == nil || name.match(principalName(r.peer)))
		}
	case *rbacconfigv3.Principal_Header:
		var h *headerMatch
		h, err = compileHeaderMatch(r.Header)
		out.leaf = h.match
	default:
		return nil, fmt.Errorf("principal %T not implemented", p.GetIdentifier())
	}
	return out, err
}

// compileRules compiles a list of Permissions or Principals (nil when the
// list is empty).
func compileRules[T any](ps []T, compile func(T) (*rbacRule, error)) ([]*rbacRule, error) {
	var out []*rbacRule
	for _, p := range ps {
		c, err := compile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func compileHeaderMatch(h *routev3.HeaderMatcher) (*headerMatch, error) {
	if err := onlyFields(h, "name", "string_match", "present_match", "invert_match"); err != nil {
		return nil, err
	}
	out := &headerMatch{name: strings.ToLower(h.GetName()), present: h.GetPresentMatch(), invert: h.GetInvertMatch()}
	if sm := h.GetStringMatch(); sm != nil {
		c, err := compileStringMatch(sm)
		if err != nil {
			return nil, err
		}
		out.value = &c
	}
	return out, nil
}

func (h *headerMatch) match(r *rbacRequest) bool {
	v, ok := r.headers[h.name]
	res := ok
	if h.value != nil {
		res = ok && h.value.match(v)
	}
	return res != h.invert
}

func (p *rbacRule) match(r *rbacRequest) bool {
	switch {
	case p.any:
		return true
	case p.and != nil:
		for _, c := range p.and {
			if !c.match(r) {
				return false
			}
		}
		return true
	case p.or != nil:
		return anyMatch(p.or, r)
	case p.not != nil:
		return !p.not.match(r)
	case p.leaf != nil:
		return p.leaf(r)
	}
	return false
}

// matched is the name of the first policy (in name order) whose
// permissions and principals both match, "" when none does.
func (e *rbacEngine) matched(r *rbacRequest) string {
	for _, p := range e.policies {
		if anyMatch(p.permissions, r) && anyMatch(p.principals, r) {
			return p.name
		}
	}
	return ""
}

// anyMatch reports whether one of rules matches r.
func anyMatch(rules []*rbacRule, r *rbacRequest) bool {
	for _, c := range rules {
		if c.match(r) {
			return true
		}
	}
	return false
}
