package startup

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

type testConfig struct {
	Common
	n    int
	mode string
}

func parseTest(args []string, errOut io.Writer) (*testConfig, error) {
	c := &testConfig{}
	fs := c.FlagSet("test-binary", "A binary for the test.", errOut)
	fs.IntVar(&c.n, "n", 1, "a number from 1 to 9")
	fs.StringVar(&c.mode, "mode", "a", "a or b")
	if err := c.Parse(fs, args); err != nil || c.Version {
		return c, err
	}
	if errs := Collect(nil, IntRange("n", c.n, 1, 9), OneOf("mode", c.mode, "a", "b")); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return c, nil
}

func TestStart(t *testing.T) {
	failed := errors.New("boom")
	for _, tt := range []struct {
		name       string
		args       []string
		runErr     error
		wantCode   int
		wantRun    bool
		wantStdout string
		wantStderr string
	}{
		{name: "runs", args: []string{"--n", "3"}, wantCode: ExitOK, wantRun: true, wantStderr: `"soft memory limit"`},
		{name: "-h", args: []string{"-h"}, wantCode: ExitOK, wantStderr: "Usage: test-binary [flags]\n\nA binary for the test."},
		{name: "--help", args: []string{"--help"}, wantCode: ExitOK, wantStderr: "-zap-log-level"},
		{name: "--version", args: []string{"--version", "--n", "0"}, wantCode: ExitOK, wantStdout: "test-binary "},
		{name: "invalid value", args: []string{"--n", "0"}, wantCode: ExitUsageError, wantStderr: "test-binary: invalid flags: --n: Invalid value: 0: must be from 1 to 9\n"},
		{name: "every problem on a line", args: []string{"--n", "0", "--mode", "c"}, wantCode: ExitUsageError,
			wantStderr: "test-binary: invalid flags: --n: Invalid value: 0: must be from 1 to 9\n" +
				`test-binary: invalid flags: --mode: Unsupported value: "c": supported values: "a", "b"` + "\n"},
		{name: "unknown flag", args: []string{"--m", "1"}, wantCode: ExitUsageError, wantStderr: "flag provided but not defined: -m"},
		{name: "argument", args: []string{"extra"}, wantCode: ExitUsageError, wantStderr: `unexpected arguments: ["extra"]`},
		{name: "run fails", args: nil, runErr: failed, wantCode: ExitFailed, wantRun: true, wantStderr: "test-binary: boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			ran := false
			run := func(ctx context.Context, c *testConfig, log logr.Logger) error {
				ran = true
				if ctx.Err() != nil {
					t.Error("run got a context that is done")
				}
				if c.n != 3 && tt.runErr == nil {
					t.Errorf("run got n=%d, want 3", c.n)
				}
				return tt.runErr
			}
			code := start("test-binary", tt.args, &stdout, &stderr, parseTest, run, context.Background)
			if code != tt.wantCode || ran != tt.wantRun {
				t.Errorf("exit %d, ran %t; want %d, %t (stderr %q)", code, ran, tt.wantCode, tt.wantRun, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) || tt.wantStdout == "" && stdout.Len() > 0 {
				t.Errorf("stdout %q, want %q", stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}

func TestParseHelp(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseTest([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-n int", "-version", "-zap-devel"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("usage lacks %q:\n%s", f, out.String())
		}
	}
}

func TestProblems(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"none", nil, 0},
		{"one", a, 1},
		{"errors.Join", errors.Join(a, b), 2},
		{"a field.ErrorList's aggregate", Collect(nil, IntRange("n", 0, 1, 9), OneOf("m", "x", "y"), nil).ToAggregate(), 2},
	} {
		if got := Problems(tc.err); len(got) != tc.want {
			t.Errorf("%s: %d problems %v, want %d", tc.name, len(got), got, tc.want)
		}
	}
}
