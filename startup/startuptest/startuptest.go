// Package startuptest runs the flag tables of the binaries that start
// through package startup: each binary's test lists arguments and what
// they must give (a configuration to check, or an error), and the usage of
// -h and --help.
package startuptest

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/startup"
)

// Case is one row of a binary's flag table.
type Case[C any] struct {
	Name string
	Args []string
	// WantErr: the parse fails with one problem (startup.Problems) per
	// entry, the i-th containing WantErr[i] (problems in the order the
	// binary's validation finds them); Check is not called.
	WantErr []string
	// Check looks at the configuration of a successful parse.
	Check func(t *testing.T, c C)
}

// Run parses each case's arguments with parse (a binary's parse function
// for startup.Main) as a subtest.
func Run[C any](t *testing.T, parse func([]string, io.Writer) (C, error), cases []Case[C]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			c, err := parse(tt.Args, io.Discard)
			if len(tt.WantErr) > 0 {
				problems := startup.Problems(err)
				if len(problems) != len(tt.WantErr) {
					t.Fatalf("%q: %d problems %v, want %d: %q", tt.Args, len(problems), problems, len(tt.WantErr), tt.WantErr)
				}
				for i, want := range tt.WantErr {
					if !strings.Contains(problems[i].Error(), want) {
						t.Errorf("%q: problem %d is %q, want one containing %q", tt.Args, i, problems[i], want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("%q: %v", tt.Args, err)
			}
			tt.Check(t, c)
		})
	}
}

// Help checks that -h and --help end the parse with flag.ErrHelp and print
// "Usage: <name> [flags]" and the flags named.
func Help[C any](t *testing.T, parse func([]string, io.Writer) (C, error), name string, flags ...string) {
	t.Helper()
	for _, arg := range []string{"-h", "--help"} {
		var out bytes.Buffer
		if _, err := parse([]string{arg}, &out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: %v, want flag.ErrHelp", arg, err)
		}
		if !strings.HasPrefix(out.String(), "Usage: "+name+" [flags]") {
			t.Errorf("%s: usage does not start with %q:\n%s", arg, "Usage: "+name+" [flags]", out.String())
		}
		for _, f := range flags {
			if !strings.Contains(out.String(), "-"+f+" ") && !strings.Contains(out.String(), "-"+f+"\n") {
				t.Errorf("%s: usage lacks -%s:\n%s", arg, f, out.String())
			}
		}
	}
}
