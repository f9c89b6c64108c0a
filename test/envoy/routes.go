package envoy

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
)

// The part of a config_dump that RouteCluster and Versions read.
type configDump struct {
	Configs []struct {
		Type              string `json:"@type"`
		VersionInfo       string `json:"version_info"`
		DynamicRouteConfs []struct {
			VersionInfo string      `json:"version_info"`
			LastUpdated string      `json:"last_updated"`
			RouteConfig routeConfig `json:"route_config"`
		} `json:"dynamic_route_configs"`
		DynamicEndpointConfigs []struct {
			VersionInfo string `json:"version_info"`
			LastUpdated string `json:"last_updated"`
		} `json:"dynamic_endpoint_configs"`
		DynamicActiveSecrets []struct {
			Name        string          `json:"name"`
			VersionInfo string          `json:"version_info"`
			LastUpdated string          `json:"last_updated"`
			Secret      json.RawMessage `json:"secret"`
		} `json:"dynamic_active_secrets"`
	} `json:"configs"`
}

type routeConfig struct {
	Name         string `json:"name"`
	VirtualHosts []struct {
		Domains []string `json:"domains"`
		Routes  []struct {
			Match struct {
				Prefix              string `json:"prefix"`
				Path                string `json:"path"`
				PathSeparatedPrefix string `json:"path_separated_prefix"`
				SafeRegex           *struct {
					Regex string `json:"regex"`
				} `json:"safe_regex"`
				CaseSensitive *bool `json:"case_sensitive"`
			} `json:"match"`
			Route *struct {
				Cluster string `json:"cluster"`
			} `json:"route"`
		} `json:"routes"`
	} `json:"virtual_hosts"`
}

// RouteCluster is the cluster that the route configurations in Envoy's
// config_dump (what Envoy accepted over RDS) send host and path to, by
// Envoy's matching of the kinds istiod generates (domains exact, "*",
// "*.suffix", "prefix.*" and "host:*"; routes by prefix, path,
// path_separated_prefix and safe_regex, in order); "" when no route
// matches or the first matching route is not to a cluster. It observes the
// configuration; Envoy itself routes the requests.
func RouteCluster(dump []byte, host, path string) (string, error) {
	var d configDump
	if err := json.Unmarshal(dump, &d); err != nil {
		return "", err
	}
	for _, c := range d.Configs {
		for _, rc := range c.DynamicRouteConfs {
			for _, vh := range rc.RouteConfig.VirtualHosts {
				if !domainMatches(vh.Domains, host) {
					continue
				}
				for _, r := range vh.Routes {
					m := r.Match
					p := path
					if m.CaseSensitive != nil && !*m.CaseSensitive {
						p = strings.ToLower(p)
						m.Prefix, m.Path, m.PathSeparatedPrefix = strings.ToLower(m.Prefix), strings.ToLower(m.Path), strings.ToLower(m.PathSeparatedPrefix)
					}
					ok := false
					switch {
					case m.Path != "":
						ok = p == m.Path
					case m.PathSeparatedPrefix != "":
						ok = p == m.PathSeparatedPrefix || strings.HasPrefix(p, m.PathSeparatedPrefix+"/")
					case m.SafeRegex != nil:
						re, err := regexp.Compile("^(?:" + m.SafeRegex.Regex + ")$")
						ok = err == nil && re.MatchString(p)
					default:
						ok = strings.HasPrefix(p, m.Prefix)
					}
					if ok {
						if r.Route == nil {
							return "", nil
						}
						return r.Route.Cluster, nil
					}
				}
				return "", nil
			}
		}
	}
	return "", nil
}

func domainMatches(domains []string, host string) bool {
	for _, d := range domains {
		switch {
		case d == "*" || strings.EqualFold(d, host):
			return true
		case strings.HasSuffix(d, ":*") && strings.EqualFold(strings.TrimSuffix(d, ":*"), host):
			return true
		case strings.HasPrefix(d, "*") && strings.HasSuffix(strings.ToLower(host), strings.ToLower(d[1:])):
			return true
		case strings.HasSuffix(d, "*") && strings.HasPrefix(strings.ToLower(host), strings.ToLower(d[:len(d)-1])):
			return true
		}
	}
	return false
}

// Versions are the xDS versions Envoy accepted, by type (LDS, CDS: their
// version_info; RDS, EDS, SDS: each resource's name, version and when it
// was last updated, sorted and joined: istiod's delta xDS leaves a
// resource's version empty, so an update shows in the time).
func Versions(dump []byte) (map[string]string, error) {
	var d configDump
	if err := json.Unmarshal(dump, &d); err != nil {
		return nil, err
	}
	out := map[string]string{}
	join := func(l []string) string { sort.Strings(l); return strings.Join(l, ",") }
	for _, c := range d.Configs {
		switch {
		case strings.HasSuffix(c.Type, ".ListenersConfigDump"):
			out["LDS"] = c.VersionInfo
		case strings.HasSuffix(c.Type, ".ClustersConfigDump"):
			out["CDS"] = c.VersionInfo
		case strings.HasSuffix(c.Type, ".RoutesConfigDump"):
			var l []string
			for _, r := range c.DynamicRouteConfs {
				l = append(l, r.RouteConfig.Name+"="+r.VersionInfo+"@"+r.LastUpdated)
			}
			out["RDS"] = join(l)
		case strings.HasSuffix(c.Type, ".EndpointsConfigDump"):
			var l []string
			for _, e := range c.DynamicEndpointConfigs {
				l = append(l, e.VersionInfo+"@"+e.LastUpdated)
			}
			out["EDS"] = join(l)
		case strings.HasSuffix(c.Type, ".SecretsConfigDump"):
			var l []string
			for _, s := range c.DynamicActiveSecrets {
				l = append(l, s.Name+"="+s.VersionInfo+"@"+s.LastUpdated)
			}
			out["SDS"] = join(l)
		}
	}
	return out, nil
}

// Secrets are the SDS secrets Envoy holds from its xDS server, name → when
// it last received it ("" until it has: a listener whose initial fetch
// timed out is active without it). istiod's SDS over delta xDS sets no
// version.
func Secrets(dump []byte) (map[string]string, error) {
	var d configDump
	if err := json.Unmarshal(dump, &d); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range d.Configs {
		for _, s := range c.DynamicActiveSecrets {
			if len(s.Secret) > 2 { // not {} or empty
				out[s.Name] = s.LastUpdated
			} else {
				out[s.Name] = ""
			}
		}
	}
	return out, nil
}
