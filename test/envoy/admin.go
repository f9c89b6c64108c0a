package envoy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Admin is Envoy's admin API, bound to loopback.
type Admin struct {
	// URL is http://127.0.0.1:<port>.
	URL string
}

func (a Admin) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("envoy admin %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// Ready reports whether Envoy's /ready answers LIVE (initialised: its
// listeners are up).
func (a Admin) Ready(ctx context.Context) bool {
	b, err := a.get(ctx, "/ready")
	return err == nil && strings.TrimSpace(string(b)) == "LIVE"
}

// Stats are Envoy's counters and gauges (/stats, histograms left out).
type Stats map[string]uint64

// Stats reads the counters and gauges whose names match the regular
// expression filter ("" for all).
func (a Admin) Stats(ctx context.Context, filter string) (Stats, error) {
	path := "/stats?type=All"
	if filter != "" {
		path = "/stats?filter=" + url.QueryEscape(filter)
	}
	b, err := a.get(ctx, path)
	if err != nil {
		return nil, err
	}
	out := Stats{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(value, 10, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// Sum is the sum of the statistics whose names end with suffix.
func (s Stats) Sum(suffix string) uint64 {
	var n uint64
	for k, v := range s {
		if strings.HasSuffix(k, suffix) {
			n += v
		}
	}
	return n
}

// Counter is one statistic's value (0 when Envoy has none of that name).
func (a Admin) Counter(ctx context.Context, name string) (uint64, error) {
	s, err := a.Stats(ctx, "^"+regexp.QuoteMeta(name)+"$")
	if err != nil {
		return 0, err
	}
	return s[name], nil
}

// ConfigDump is /config_dump (with endpoints when eds is true).
func (a Admin) ConfigDump(ctx context.Context, eds bool) ([]byte, error) {
	if eds {
		return a.get(ctx, "/config_dump?include_eds")
	}
	return a.get(ctx, "/config_dump")
}

// ServerInfo is the part of /server_info tests read: the version and the
// extensions the binary has.
type ServerInfo struct {
	Version string `json:"version"`
	State   string `json:"state"`
	Node    struct {
		ID         string      `json:"id"`
		Extensions []Extension `json:"extensions"`
	} `json:"node"`
}

// Extension is one extension compiled into Envoy.
type Extension struct {
	Name     string   `json:"name"`
	Category string   `json:"category"`
	TypeURLs []string `json:"type_urls"`
	Disabled bool     `json:"disabled"`
}

// ServerInfo reads /server_info.
func (a Admin) ServerInfo(ctx context.Context) (*ServerInfo, error) {
	b, err := a.get(ctx, "/server_info")
	if err != nil {
		return nil, err
	}
	var si ServerInfo
	if err := json.Unmarshal(b, &si); err != nil {
		return nil, err
	}
	return &si, nil
}

// ListenerPorts are the ports of Envoy's active listeners by listener name
// (/listeners).
func (a Admin) ListenerPorts(ctx context.Context) (map[string]int, error) {
	b, err := a.get(ctx, "/listeners?format=json")
	if err != nil {
		return nil, err
	}
	var ls struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					PortValue int `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(b, &ls); err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, l := range ls.ListenerStatuses {
		out[l.Name] = l.LocalAddress.SocketAddress.PortValue
	}
	return out, nil
}
