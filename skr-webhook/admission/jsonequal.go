package admission

import (
	"bytes"
	"encoding/json"
	"slices"
)

// jsonEqual reports whether two valid JSON texts hold the same value, with
// the semantics of decoding both into `any` with json.Decoder.UseNumber and
// comparing with reflect.DeepEqual — object key order does not matter, the
// last of duplicate keys wins, numbers compare as their literal text, strings
// after unescaping — but without building either tree: it walks the bytes,
// keeping per object level only a sorted index of its members (slices of the
// input). Memory is a small multiple of the number of members, not of the
// decoded values. Both inputs must be valid JSON (encoding/json validated
// them). ignoreBookkeeping drops metadata.resourceVersion and
// metadata.managedFields of the top-level objects.
func jsonEqual(a, b []byte, ignoreBookkeeping bool) bool {
	return valueEqual(trimWS(a), trimWS(b), ignoreBookkeeping, 0)
}

// level of the value being compared: 0 = top, 1 = a member of the top object.
func valueEqual(a, b []byte, ignoreBookkeeping bool, level int) bool {
	if bytes.Equal(a, b) && !ignoreBookkeeping {
		return true
	}
	if len(a) == 0 || len(b) == 0 || a[0] != b[0] {
		return false // different kinds of value, or numbers with different text
	}
	switch a[0] {
	case '{':
		return objectEqual(a, b, ignoreBookkeeping, level)
	case '[':
		return arrayEqual(a, b)
	case '"':
		return stringEqual(a, b)
	default: // numbers (literal text, as json.Number), true, false, null
		return bytes.Equal(a, b)
	}
}

type member struct {
	key, value []byte // key unescaped (or a slice of the input when it needs none)
}

// members lists an object's members sorted by key, the last of duplicate
// keys kept.
func members(obj []byte) []member {
	var ms []member
	i := skipWS(obj, 1)
	for i < len(obj) && obj[i] != '}' {
		kEnd := skipString(obj, i)
		key := unquote(obj[i:kEnd])
		i = skipWS(obj, kEnd)
		i = skipWS(obj, i+1) // ':'
		vEnd := skipValue(obj, i)
		ms = append(ms, member{key: key, value: obj[i:vEnd]})
		i = skipWS(obj, vEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
	slices.SortStableFunc(ms, func(x, y member) int { return bytes.Compare(x.key, y.key) })
	out := ms[:0]
	for j, m := range ms {
		if j+1 < len(ms) && bytes.Equal(ms[j+1].key, m.key) {
			continue // a later duplicate wins
		}
		out = append(out, m)
	}
	return out
}

func objectEqual(a, b []byte, ignoreBookkeeping bool, level int) bool {
	ma, mb := members(a), members(b)
	if ignoreBookkeeping && level == 1 {
		ma, mb = dropBookkeeping(ma), dropBookkeeping(mb)
	}
	if len(ma) != len(mb) {
		return false
	}
	for i := range ma {
		if !bytes.Equal(ma[i].key, mb[i].key) {
			return false
		}
		sub := ignoreBookkeeping && level == 0 && string(ma[i].key) == "metadata"
		if !valueEqual(ma[i].value, mb[i].value, sub, level+1) {
			return false
		}
	}
	return true
}

func dropBookkeeping(ms []member) []member {
	return slices.DeleteFunc(ms, func(m member) bool {
		return string(m.key) == "resourceVersion" || string(m.key) == "managedFields"
	})
}

func arrayEqual(a, b []byte) bool {
	i, j := skipWS(a, 1), skipWS(b, 1)
	for {
		endA, endB := i >= len(a) || a[i] == ']', j >= len(b) || b[j] == ']'
		if endA || endB {
			return endA == endB
		}
		vi, vj := skipValue(a, i), skipValue(b, j)
		if !valueEqual(a[i:vi], b[j:vj], false, 2) {
			return false
		}
		i, j = skipWS(a, vi), skipWS(b, vj)
		if i < len(a) && a[i] == ',' {
			i = skipWS(a, i+1)
		}
		if j < len(b) && b[j] == ',' {
			j = skipWS(b, j+1)
		}
	}
}

func stringEqual(a, b []byte) bool {
	return bytes.Equal(unquote(a), unquote(b))
}

// unquote returns a JSON string's value; without escapes and with plain
// ASCII it is a slice of the input, otherwise encoding/json decodes it (so
// invalid UTF-8 becomes U+FFFD exactly as when decoding into `any`).
func unquote(s []byte) []byte {
	inner := s[1 : len(s)-1]
	for _, c := range inner {
		if c == '\\' || c >= 0x80 {
			var v string
			if err := json.Unmarshal(s, &v); err != nil {
				return s // cannot happen for validated input; compare raw
			}
			return []byte(v)
		}
	}
	return inner
}

func trimWS(b []byte) []byte { return bytes.TrimSpace(b) }

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default:
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}
