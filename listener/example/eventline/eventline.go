// Package eventline is the format of the example operator's --print=json
// output: one JSON object per event it received. The operator writes it;
// `make run` and the e2e suite read it (from the process, or from the pod's
// log on kind).
package eventline

import (
	"encoding/json"
	"time"
)

// Line is one event as the example operator received it.
type Line struct {
	// Time is when the listener's channel delivered the event.
	Time      time.Time `json:"time"`
	RuntimeID string    `json:"runtimeID"`
	Watched   Object    `json:"watched"`
	GVK       GVK       `json:"gvk"`
	// Kyma is the KCP Kyma the operator reconciled and KymaState what it
	// found ("exists" or "not found").
	Kyma      string `json:"kyma"`
	KymaState string `json:"kymaState"`
	// Resync is the reason of a resync event ("startup", "overflow",
	// "expired"): the operator re-read the runtime. Empty for a change;
	// Watched and GVK are then empty.
	Resync string `json:"resync,omitempty"`
}

// Object names the watched SKR object.
type Object struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// GVK of the watched object.
type GVK struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// Parse reads one output line; ok is false for lines that are not events
// (the operator's start-up message, for one).
func Parse(b []byte) (l Line, ok bool) {
	if json.Unmarshal(b, &l) != nil || l.RuntimeID == "" {
		return Line{}, false
	}
	return l, true
}
