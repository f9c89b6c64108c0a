package listener

import (
	"bytes"
	"encoding/json"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// decodeWatchEvent decodes an event body into we exactly as json.Unmarshal
// does (same result, same errors). encoding/json's reflection was the
// largest cost of a request (issue 18: 6 µs of about 10 µs in the handler),
// so the bodies senders write — a flat object of the known keys, strings of
// printable ASCII without escapes, heartbeat true or false — are read by a
// small scanner; anything else (escapes, non-ASCII, unknown keys, null,
// numbers, malformed JSON) goes to json.Unmarshal. FuzzDecodeWatchEvent
// checks that the scanner never accepts a body json.Unmarshal reads
// differently.
func decodeWatchEvent(body []byte, we *contract.WatchEvent) error {
	if scanWatchEvent(body, we) {
		return nil
	}
	// A variable of its own: json.Unmarshal moves what it decodes into to
	// the heap, and only this path should pay for that.
	var slow contract.WatchEvent
	err := json.Unmarshal(body, &slow)
	*we = slow
	return err
}

// scanWatchEvent reads the simple form of a WatchEvent into we, or reports
// false (we then holds partial values). Keys match as in encoding/json:
// exactly or ignoring case — for ASCII keys (the only ones accepted) that
// is ASCII case folding. A repeated key decodes into the same field again,
// as in encoding/json (a repeated object merges). The strings in we share
// one copy of body (one allocation per event, not one per field).
func scanWatchEvent(body []byte, we *contract.WatchEvent) bool {
	s := scanner{b: body}
	ok := s.object(func(key []byte) bool {
		switch {
		case keyIs(key, "watched"):
			return s.object(func(k []byte) bool {
				switch {
				case keyIs(k, "namespace"):
					return s.str(&we.Watched.Namespace)
				case keyIs(k, "name"):
					return s.str(&we.Watched.Name)
				}
				return false
			})
		case keyIs(key, "watchedGvk"):
			return s.object(func(k []byte) bool {
				switch {
				case keyIs(k, "group"):
					return s.str(&we.WatchedGvk.Group)
				case keyIs(k, "version"):
					return s.str(&we.WatchedGvk.Version)
				case keyIs(k, "kind"):
					return s.str(&we.WatchedGvk.Kind)
				}
				return false
			})
		case keyIs(key, "resync"):
			var r string
			if !s.str(&r) {
				return false
			}
			we.Resync = contract.ResyncReason(r)
			return true
		case keyIs(key, "heartbeat"):
			return s.boolean(&we.Heartbeat)
		}
		return false
	})
	s.space()
	return ok && s.i == len(s.b)
}

// keyIs: key equals name up to ASCII case (key and name are ASCII).
func keyIs(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i := range len(key) {
		if lowerASCII(key[i]) != lowerASCII(name[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

type scanner struct {
	b    []byte
	text string // string(b) once str needs it: the values it reads share it
	i    int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling member for each key with the
// scanner before the value; member reads the value.
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		s.space()
		key, ok := s.raw()
		if !ok || !s.next(':') {
			return false
		}
		s.space()
		if !member(key) {
			return false
		}
		if s.next(',') {
			continue
		}
		return s.next('}')
	}
}

// raw reads a string of printable ASCII without escapes and returns its
// bytes (in the body).
func (s *scanner) raw() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

func (s *scanner) str(dst *string) bool {
	start := s.i + 1
	v, ok := s.raw()
	if ok {
		if s.text == "" {
			s.text = string(s.b)
		}
		*dst = s.text[start : start+len(v)]
	}
	return ok
}

func (s *scanner) boolean(dst *bool) bool {
	rest := s.b[s.i:]
	switch {
	case bytes.HasPrefix(rest, []byte("true")):
		*dst = true
		s.i += 4
	case bytes.HasPrefix(rest, []byte("false")):
		*dst = false
		s.i += 5
	default:
		return false
	}
	return true
}
