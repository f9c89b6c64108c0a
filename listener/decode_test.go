package listener

import (
	"encoding/json"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// decodeSeeds: the bodies senders write, and the forms the scanner must
// leave to encoding/json.
var decodeSeeds = []string{
	`{"watched":{"namespace":"kcp-system","name":"kyma-sample"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`,
	`{"watched":{},"watchedGvk":{},"resync":"startup"}`,
	`{"watched":{},"watchedGvk":{},"heartbeat":true}`,
	`{"watched":{},"watchedGvk":{},"heartbeat":false}`,
	" {\n \"watched\" : { \"Namespace\" : \"a\" , \"Name\" : \"b\" } ,\t\"WATCHEDGVK\":{\"version\":\"v1\",\"kind\":\"K\"}}\r\n",
	`{"watched":{"name":"a"},"watched":{"namespace":"b"}}`,
	`{"watched":{"name":"a"},"Watched":{"name":"c"}}`,
	`{"watched":{"name":"a\u0062"}}`,
	`{"watched":{"name":"é"}}`,
	`{"watched":{"name":"a\nb"}}`,
	"{\"watched\":{\"name\":\"a\xffb\"}}",
	`{"watched":{"name":null}}`,
	`{"watched":null}`,
	`null`,
	``,
	`{}`,
	`{"watched":{"name":1}}`,
	`{"heartbeat":"true"}`,
	`{"heartbeat":truex}`,
	`{"heartbeat":tru}`,
	`{"resync":"overflow","extra":[1,2]}`,
	`{"watched":{"name":"a","uid":"x"}}`,
	`{"watched":{"name":"a"}}x`,
	`{"watched":{"name":"a"}}{}`,
	`{"watched":{"name":"a"},}`,
	`{"watched":{"name":"a"}`,
	`{"watched":{"name":"a"`,
	`{"watched":{"name":"a}}`,
	`{"watched" {"name":"a"}}`,
	`{"watched":{"name":"a",}}`,
	`[]`,
	`{"ſesync":"startup"}`,
	`{"watchedGvK":{"Kind":"x"}}`,
}

// TestDecodeWatchEvent: decodeWatchEvent gives json.Unmarshal's result and
// error on every seed, and the scanner takes the common bodies.
func TestDecodeWatchEvent(t *testing.T) {
	for _, body := range decodeSeeds {
		checkDecode(t, []byte(body))
	}
	for _, body := range decodeSeeds[:5] {
		var we contract.WatchEvent
		if !scanWatchEvent([]byte(body), &we) {
			t.Errorf("the scanner leaves %q to encoding/json", body)
		}
	}
}

func FuzzDecodeWatchEvent(f *testing.F) {
	for _, body := range decodeSeeds {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecode(t, body) })
}

func checkDecode(t *testing.T, body []byte) {
	t.Helper()
	var want, got, scanned contract.WatchEvent
	wantErr := json.Unmarshal(body, &want)
	gotErr := decodeWatchEvent(body, &got)
	if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
		t.Fatalf("%q: error %v, json.Unmarshal says %v", body, gotErr, wantErr)
	}
	if wantErr == nil && got != want {
		t.Fatalf("%q: decoded %+v, json.Unmarshal says %+v", body, got, want)
	}
	if scanWatchEvent(body, &scanned) && (wantErr != nil || scanned != want) {
		t.Fatalf("%q: the scanner accepts %+v, json.Unmarshal says %+v, %v", body, scanned, want, wantErr)
	}
}
