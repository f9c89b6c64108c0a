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

type permission struct {
	any      bool
	and, or  []*permission
	not      *permission
	urlPath  *stringMatch
	header   *headerMatch
	destPort uint32
}

type principal struct {
	any           bool
	and, or       []*principal
	not           *principal
	authenticated *stringMatch // nil with authenticated set: any verified peer
	isAuth        bool
	header        *headerMatch
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
		for _, perm := range p.GetPermissions() {
			c, err := compilePermission(perm)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", name, err)
			}
			cp.permissions = append(cp.permissions, c)
		}
		for _, prin := range p.GetPrincipals() {
			c, err := compilePrincipal(prin)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", name, err)
			}
			cp.principals = append(cp.principals, c)
		}
		out.policies = append(out.policies, cp)
	}
	return out, nil
}

func compilePermission(p *rbacconfigv3.Permission) (*permission, error) {
	out := &permission{}
	var err error
	switch r := p.GetRule().(type) {
	case *rbacconfigv3.Permission_Any:
		out.any = r.Any
	case *rbacconfigv3.Permission_AndRules:
		out.and, err = compilePermissions(r.AndRules.GetRules())
	case *rbacconfigv3.Permission_OrRules:
		out.or, err = compilePermissions(r.OrRules.GetRules())
	case *rbacconfigv3.Permission_NotRule:
		out.not, err = compilePermission(r.NotRule)
	case *rbacconfigv3.Permission_UrlPath:
		if err := onlyFields(r.UrlPath, "path"); err != nil {
			return nil, err
		}
		var sm stringMatch
		sm, err = compileStringMatch(r.UrlPath.GetPath())
		out.urlPath = &sm
	case *rbacconfigv3.Permission_Header:
		out.header, err = compileHeaderMatch(r.Header)
	case *rbacconfigv3.Permission_DestinationPort:
		out.destPort = r.DestinationPort
	default:
		return nil, fmt.Errorf("permission %T not implemented", p.GetRule())
	}
	return out, err
}

func compilePermissions(ps []*rbacconfigv3.Permission) ([]*permission, error) {
	var out []*permission
	for _, p := range ps {
		c, err := compilePermission(p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func compilePrincipal(p *rbacconfigv3.Principal) (*principal, error) {
	out := &principal{}
	var err error
	switch r := p.GetIdentifier().(type) {
	case *rbacconfigv3.Principal_Any:
		out.any = r.Any
	case *rbacconfigv3.Principal_AndIds:
		out.and, err = compilePrincipals(r.AndIds.GetIds())
	case *rbacconfigv3.Principal_OrIds:
		out.or, err = compilePrincipals(r.OrIds.GetIds())
	case *rbacconfigv3.Principal_NotId:
		out.not, err = compilePrincipal(r.NotId)
	case *rbacconfigv3.Principal_Authenticated_:
		out.isAuth = true
		if pn := r.Authenticated.GetPrincipalName(); pn != nil {
			var sm stringMatch
			sm, err = compileStringMatch(pn)
			out.authenticated = &sm
		}
	case *rbacconfigv3.Principal_Header:
		out.header, err = compileHeaderMatch(r.Header)
	default:
		return nil, fmt.Errorf("principal %T not implemented", p.GetIdentifier())
	}
	return out, err
}

func compilePrincipals(ps []*rbacconfigv3.Principal) ([]*principal, error) {
	var out []*principal
	for _, p := range ps {
		c, err := compilePrincipal(p)
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

func (p *permission) match(r *rbacRequest) bool {
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
		for _, c := range p.or {
			if c.match(r) {
				return true
			}
		}
		return false
	case p.not != nil:
		return !p.not.match(r)
	case p.urlPath != nil:
		return p.urlPath.match(r.path)
	case p.header != nil:
		return p.header.match(r)
	case p.destPort != 0:
		return r.destPort == p.destPort
	}
	return false
}

func (p *principal) match(r *rbacRequest) bool {
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
		for _, c := range p.or {
			if c.match(r) {
				return true
			}
		}
		return false
	case p.not != nil:
		return !p.not.match(r)
	case p.isAuth:
		if r.peer == nil {
			return false
		}
		return p.authenticated == nil || p.authenticated.match(principalName(r.peer))
	case p.header != nil:
		return p.header.match(r)
	}
	return false
}

// matched is the name of the first policy (in name order) whose
// permissions and principals both match, "" when none does.
func (e *rbacEngine) matched(r *rbacRequest) string {
	for _, p := range e.policies {
		if anyPermission(p.permissions, r) && anyPrincipal(p.principals, r) {
			return p.name
		}
	}
	return ""
}

func anyPermission(ps []*permission, r *rbacRequest) bool {
	for _, p := range ps {
		if p.match(r) {
			return true
		}
	}
	return false
}

func anyPrincipal(ps []*principal, r *rbacRequest) bool {
	for _, p := range ps {
		if p.match(r) {
			return true
		}
	}
	return false
}
