// Package startup is how every Runtime Watcher binary starts: flags →
// configuration → run(ctx, cfg) error. It holds what each binary used to
// repeat: the FlagSet with the flags every binary has (--version and zap's
// logging flags), the exit codes (0 after -h/--help and --version, 2 for
// invalid flags, 1 when run fails), the logger (zap through logr, also
// controller-runtime's), Go's soft memory limit (package memlimit) and the
// context that SIGTERM or SIGINT ends.
//
// A binary has a configuration type that embeds Common, a parse function
// that turns arguments into a validated configuration without side effects
// or exits (so flag validation is a table test), validating in one
// function that collects every problem (validate.go), and a run function
// that returns an error:
//
//	func main() { startup.Main("ext-authz", parseFlags, run) }
package startup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/seed-c8be168e/runtime-watcher/memlimit"
	"github.com/seed-c8be168e/runtime-watcher/version"
)

// Exit codes of Main.
const (
	ExitOK         = 0 // -h, --help, --version, or run returned nil
	ExitFailed     = 1 // run returned an error
	ExitUsageError = 2 // invalid flags or arguments
)

// Common are the flags every binary has. A binary's configuration embeds
// it and sets Zap's defaults before calling FlagSet.
type Common struct {
	// Zap: the logging flags (--zap-log-level, --zap-devel, …).
	Zap zap.Options
	// Version: --version was given; the rest of the flags is not
	// validated.
	Version bool

	version *bool
}

// StartupFlags gives Main the common flags of a configuration that
// embeds Common.
func (c *Common) StartupFlags() *Common { return c }

// Config is a binary's configuration: it embeds Common.
type Config interface {
	StartupFlags() *Common
}

// FlagSet is a FlagSet for binary name whose errors are returned (never
// exits) and whose usage, "Usage: <name> [flags]", the summary and the
// flags, goes to errOut; the common flags are bound on it.
func (c *Common) FlagSet(name, summary string, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\n%s\n\n", name, summary)
		fs.PrintDefaults()
	}
	c.version = version.BindFlag(fs)
	c.Zap.BindFlags(fs)
	return fs
}

// Parse parses args (without the program name) on fs, made by FlagSet: -h
// and --help print the usage and return flag.ErrHelp; arguments that are
// not flags are an error. Version is set afterwards: a binary validates
// nothing else when it is.
func (c *Common) Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.version != nil {
		c.Version = *c.version
	}
	if c.Version {
		return nil
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return nil
}

// Main runs binary name and exits: parse turns the arguments into the
// configuration (ExitOK after -h/--help, ExitUsageError when invalid, each
// problem printed on a line of its own), then
// --version prints the version, or the logger and the soft memory limit are
// set up and run runs until SIGTERM or SIGINT ends its context (a second
// signal exits at once). An error of run is logged and printed to stderr:
// ExitFailed.
func Main[C Config](name string, parse func(args []string, errOut io.Writer) (C, error), run func(ctx context.Context, cfg C, log logr.Logger) error) {
	os.Exit(start(name, os.Args[1:], os.Stdout, os.Stderr, parse, run, signals.SetupSignalHandler))
}

// start is Main without the exit, the process's arguments and its signals.
func start[C Config](name string, args []string, stdout, stderr io.Writer, parse func([]string, io.Writer) (C, error),
	run func(context.Context, C, logr.Logger) error, signalContext func() context.Context) int {
	cfg, err := parse(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case err != nil:
		for _, p := range Problems(err) {
			fmt.Fprintf(stderr, "%s: invalid flags: %v\n", name, p)
		}
		return ExitUsageError
	}
	common := cfg.StartupFlags()
	if common.Version {
		version.Print(stdout, name)
		return ExitOK
	}
	root := zap.New(zap.UseFlagOptions(&common.Zap), zap.WriteTo(stderr))
	ctrllog.SetLogger(root)
	log := root.WithName(name)
	limit, source, err := memlimit.Apply(os.Getenv, memlimit.CgroupRoot, memlimit.DefaultRatio)
	if err != nil {
		log.Info("no soft memory limit from the cgroup", "error", err.Error())
	}
	log.Info("soft memory limit", "limit", memlimit.String(limit), "source", source)
	if err := run(signalContext(), cfg, log); err != nil {
		log.Error(err, "stopped with an error")
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitFailed
	}
	return ExitOK
}
