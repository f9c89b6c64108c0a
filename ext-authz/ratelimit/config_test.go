package ratelimit_test

import (
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
)

func TestParseClasses(t *testing.T) {
	got, err := ratelimit.ParseClasses(" trial=10/200, aws=100.5/2000")
	if err != nil || len(got) != 2 || got["trial"] != (ratelimit.Limit{Rate: 10, Burst: 200}) || got["aws"] != (ratelimit.Limit{Rate: 100.5, Burst: 2000}) {
		t.Fatalf("ParseClasses = %v, %v", got, err)
	}
	if got, err := ratelimit.ParseClasses(""); err != nil || len(got) != 0 {
		t.Fatalf("ParseClasses(\"\") = %v, %v", got, err)
	}
	for _, bad := range []string{
		"trial", "=1/1", "trial=1", "trial=x/1", "trial=1/x", "trial=0/1", "trial=1/0", "trial=NaN/1", "trial=Inf/1",
		"trial=1e7/1", "trial=1/1000001", "trial=1/1,trial=2/2", "tr ial=1/1", "trial=1/1,", strings.Repeat("a", 64) + "=1/1",
		"a=-1/5",
	} {
		if got, err := ratelimit.ParseClasses(bad); err == nil {
			t.Errorf("ParseClasses(%q) = %v, want an error", bad, got)
		}
	}
	var many []string
	for i := range ratelimit.MaxClasses + 1 {
		many = append(many, "c"+strings.Repeat("x", i)+"=1/1")
	}
	if _, err := ratelimit.ParseClasses(strings.Join(many, ",")); err == nil {
		t.Errorf("%d classes accepted, want at most %d", len(many), ratelimit.MaxClasses)
	}
}

// FuzzParseClasses: any input is refused or read into valid limits that
// read back the same from their String.
func FuzzParseClasses(f *testing.F) {
	for _, s := range []string{"trial=10/200", "a=1/1,b=2.5/3", "", "x=1e6/1000000", "=", "a=/", "a=1/1,a=1/1", "a=0x10/1", "a=1_0/1", "a=+1/+1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		classes, err := ratelimit.ParseClasses(s)
		if err != nil {
			return
		}
		if len(classes) > ratelimit.MaxClasses {
			t.Fatalf("%d classes", len(classes))
		}
		for name, l := range classes {
			if name == "" || l.Validate() != nil {
				t.Fatalf("class %q limit %+v accepted", name, l)
			}
			back, err := ratelimit.ParseLimit(l.String())
			if err != nil || back != l {
				t.Fatalf("%+v → %q → %+v, %v", l, l.String(), back, err)
			}
			if _, err := ratelimit.New(ratelimit.Config{Mode: ratelimit.ModeEnforce, Default: l, Classes: classes}); err != nil {
				t.Fatalf("New refuses what ParseClasses accepted: %v", err)
			}
		}
	})
}
