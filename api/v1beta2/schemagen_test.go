package v1beta2_test

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// This file generates objects from an OpenAPI v3 schema (a CRD's): a base
// value with every required field, and variants that change one place of it
// to a boundary value, leave an optional field out, or give a wrong type.

// variant changes one place of a base object.
type variant struct {
	desc  string
	path  []string // property names; "[0]" is a list's first item
	value any
	del   bool
}

var jsonMarshal = json.Marshal

func deepCopy(v any) any { return runtime.DeepCopyJSONValue(v) }

// applyTo sets (or deletes) the variant's place under obj[key], whose
// schema is s; missing parents get their base values.
func (v variant) applyTo(obj map[string]any, key string, s *apiextensionsv1.JSONSchemaProps) {
	nv, keep := with(obj[key], s, v.path, v.value, v.del)
	if keep {
		obj[key] = nv
	} else {
		delete(obj, key)
	}
}

func with(cur any, s *apiextensionsv1.JSONSchemaProps, path []string, value any, del bool) (any, bool) {
	if len(path) == 0 {
		if del {
			return nil, false
		}
		return deepCopy(value), true
	}
	if path[0] == "[0]" {
		items := s.Items.Schema
		list, _ := cur.([]any)
		var elem any
		if len(list) > 0 {
			elem = list[0]
		} else {
			elem = baseValue(items)
		}
		nv, keep := with(elem, items, path[1:], value, del)
		if !keep {
			return []any{}, true
		}
		return []any{nv}, true
	}
	m, _ := cur.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	child := childSchema(s, path[0])
	elem, ok := m[path[0]]
	if !ok {
		elem = baseValue(child)
	}
	nv, keep := with(elem, child, path[1:], value, del)
	if keep {
		m[path[0]] = nv
	} else {
		delete(m, path[0])
	}
	return m, true
}

func childSchema(s *apiextensionsv1.JSONSchemaProps, name string) *apiextensionsv1.JSONSchemaProps {
	if p, ok := s.Properties[name]; ok {
		return &p
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		return s.AdditionalProperties.Schema
	}
	return &apiextensionsv1.JSONSchemaProps{}
}

// baseValue is a value of s with every required field and nothing else.
func baseValue(s *apiextensionsv1.JSONSchemaProps) any {
	switch s.Type {
	case "object":
		m := map[string]any{}
		for _, r := range s.Required {
			m[r] = baseValue(childSchema(s, r))
		}
		return m
	case "string":
		if len(s.Enum) > 0 {
			var v any
			if err := json.Unmarshal(s.Enum[0].Raw, &v); err == nil {
				return v
			}
		}
		if s.Format == "date-time" {
			return "2026-01-01T00:00:00Z"
		}
		return "x"
	case "integer":
		if s.Minimum != nil && *s.Minimum > 1 {
			return int64(*s.Minimum)
		}
		return int64(1)
	case "boolean":
		return true
	case "array":
		return []any{}
	}
	return nil
}

// fullValue is a value of s with every property, required or not.
func fullValue(s *apiextensionsv1.JSONSchemaProps) any {
	switch s.Type {
	case "object":
		if len(s.Properties) == 0 {
			return map[string]any{"k": "v"}
		}
		m := map[string]any{}
		for name := range s.Properties {
			m[name] = fullValue(childSchema(s, name))
		}
		return m
	case "array":
		return []any{fullValue(s.Items.Schema)}
	}
	return baseValue(s)
}

func stringValues(s *apiextensionsv1.JSONSchemaProps) []any {
	vals := []string{
		"", "x", "Lifecycle-Manager", "klm.v2", "UPPER_case", "with space", "a/b", "*", "ümlaut",
		"-leading-dash", "trailing-dash-", "lifecycle-manager", "spec", "status", "Ready", "Unmanaged",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 253), strings.Repeat("a", 254),
	}
	for _, e := range s.Enum {
		var v string
		if json.Unmarshal(e.Raw, &v) == nil {
			vals = append(vals, v)
		}
	}
	if len(s.Enum) > 0 {
		vals = append(vals, "not-in-the-enum")
	}
	if s.MaxLength != nil {
		vals = append(vals, strings.Repeat("a", int(*s.MaxLength)), strings.Repeat("a", int(*s.MaxLength)+1))
	}
	if s.Format == "date-time" {
		vals = append(vals, "2026-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "not-a-date")
	}
	out := make([]any, len(vals))
	for i, v := range vals {
		out[i] = v
	}
	return out
}

func intValues(s *apiextensionsv1.JSONSchemaProps) []any {
	vals := []int64{0, -1, 1, 8082, 65535, 65536, math.MaxInt32, math.MaxInt32 + 1, math.MaxInt64, math.MinInt64}
	for _, b := range []*float64{s.Minimum, s.Maximum} {
		if b != nil {
			vals = append(vals, int64(*b)-1, int64(*b), int64(*b)+1)
		}
	}
	out := make([]any, len(vals))
	for i, v := range vals {
		out[i] = v
	}
	return out
}

var mapKeys = []string{"k", "a/b", "operator.kyma-project.io/watched-by", "with space", "UPPER", "x.y/z-1"}

// variantsOf are the variants of every place in s (at path).
func variantsOf(s *apiextensionsv1.JSONSchemaProps, path []string) []variant {
	p := slices.Clone(path)
	name := strings.Join(p, ".")
	if name == "" {
		name = "(root)"
	}
	var out []variant
	add := func(desc string, value any) {
		out = append(out, variant{desc: name + ": " + desc, path: p, value: value})
	}
	switch s.Type {
	case "string":
		for _, v := range stringValues(s) {
			d := fmt.Sprintf("%q", v)
			if len(d) > 40 {
				d = fmt.Sprintf("%d characters", len(v.(string)))
			}
			add(d, v)
		}
		add("wrong type (number)", int64(5))
	case "integer":
		for _, v := range intValues(s) {
			add(fmt.Sprint(v), v)
		}
		add("wrong type (string)", "1")
		add("a float", 1.5)
	case "boolean":
		add("true", true)
		add("false", false)
		add("wrong type (string)", "true")
	case "array":
		add("empty list", []any{})
		add("two items", []any{fullValue(s.Items.Schema), baseValue(s.Items.Schema)})
		add("wrong type (string)", "x")
		out = append(out, variantsOf(s.Items.Schema, append(p, "[0]"))...)
	case "object":
		add("wrong type (string)", "x")
		add("empty object", map[string]any{})
		if len(s.Properties) == 0 {
			if ap := s.AdditionalProperties; ap != nil && ap.Schema != nil {
				for _, k := range mapKeys {
					add("key "+k, map[string]any{k: baseValue(ap.Schema)})
				}
				for _, v := range stringValues(ap.Schema) {
					add(fmt.Sprintf("value %.40q", v), map[string]any{"k": v})
				}
			}
			return out
		}
		add("every property", fullValue(s))
		withUnknown := baseValue(s).(map[string]any)
		withUnknown["unknownField"] = "x"
		add("an unknown field", withUnknown)
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, variant{desc: name + "." + n + ": absent", path: append(slices.Clone(p), n), del: true})
			out = append(out, variantsOf(childSchema(s, n), append(slices.Clone(p), n))...)
		}
	}
	return out
}
