package envoy

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// typedStructs carry another extension's config by its type_url.
var typedStructs = []string{"type.googleapis.com/udpa.type.v1.TypedStruct", "type.googleapis.com/xds.type.v3.TypedStruct"}

// typedMaps are fields whose values (map entries) are extension configs.
var typedMaps = []string{"typed_per_filter_config", "typed_extension_protocol_options", "typed_filter_metadata"}

// UsedExtensions are the extension config types a config_dump (or a
// bootstrap, as JSON) names: the @type of every typed_config and of every
// value of typed_per_filter_config and typed_extension_protocol_options,
// a TypedStruct's type_url in its place, each with the JSON path where it
// first occurs.
func UsedExtensions(configJSON []byte) (map[string]string, error) {
	var doc any
	if err := json.Unmarshal(configJSON, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(v any, path string, typed bool)
	walk = func(v any, path string, typed bool) {
		switch v := v.(type) {
		case map[string]any:
			if typed {
				if t, ok := v["@type"].(string); ok {
					if slices.Contains(typedStructs, t) {
						if u, ok := v["type_url"].(string); ok {
							t = u
						}
					}
					if _, seen := out[t]; !seen {
						out[t] = path
					}
				}
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				switch {
				case k == "typed_config":
					walk(v[k], path+"."+k, true)
				case slices.Contains(typedMaps, k):
					if m, ok := v[k].(map[string]any); ok {
						for name, cfg := range m {
							if k == "typed_filter_metadata" {
								continue // metadata, not config
							}
							walk(cfg, path+"."+k+"."+name, true)
						}
					}
				default:
					walk(v[k], path+"."+k, false)
				}
			}
		case []any:
			for i, e := range v {
				walk(e, fmt.Sprintf("%s[%d]", path, i), false)
			}
		}
	}
	walk(doc, "", false)
	return out, nil
}

// UnknownExtensions are the extension config types configJSON names that
// none of the binary's extensions (ServerInfo's) takes, each with where it
// is named.
func UnknownExtensions(configJSON []byte, have []Extension) (map[string]string, error) {
	used, err := UsedExtensions(configJSON)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, e := range have {
		if e.Disabled {
			continue
		}
		for _, u := range e.TypeURLs {
			known["type.googleapis.com/"+u] = true
			known[u] = true
		}
	}
	out := map[string]string{}
	for t, where := range used {
		if !known[t] {
			out[t] = where
		}
	}
	return out, nil
}

// WithoutBootstrap is a config_dump without its bootstrap (which `envoy
// --mode validate` checks; its built-in parts, such as the overload
// manager's resource monitors, are not all listed among server_info's
// extensions): what came over xDS.
func WithoutBootstrap(dump []byte) ([]byte, error) {
	var d struct {
		Configs []json.RawMessage `json:"configs"`
	}
	if err := json.Unmarshal(dump, &d); err != nil {
		return nil, err
	}
	var keep []json.RawMessage
	for _, c := range d.Configs {
		var t struct {
			Type string `json:"@type"`
		}
		if err := json.Unmarshal(c, &t); err != nil {
			return nil, err
		}
		if t.Type != "type.googleapis.com/envoy.admin.v3.BootstrapConfigDump" {
			keep = append(keep, c)
		}
	}
	return json.Marshal(map[string]any{"configs": keep})
}
