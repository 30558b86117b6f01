// Package startup is the one way Cloister's binaries start: a context
// cancelled on SIGINT or SIGTERM, a run function that returns an error,
// JSON logs on stderr at a level set by --log-level, and one exit code
// policy (0, the code an ExitCoder asks for, or 1 with the error).
package startup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// ExitCoder is an error that chooses the exit code; the command has said
// why already.
type ExitCoder interface {
	error
	ExitCode() int
}

// Main runs run until it returns or a signal cancels its context, then
// exits with Code.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	os.Exit(Code(name, err, os.Stderr))
}

// Code is the exit code for run's error: 0 without one or when help was
// asked for, an ExitCoder's own code, else 1 after printing "name: error".
func Code(name string, err error, stderr io.Writer) int {
	var coder ExitCoder
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &coder):
		return coder.ExitCode()
	default:
		_, _ = fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
}

// LogLevelFlag, LogLevelDefault and LogLevelUsage define --log-level, the
// same in every binary.
const (
	LogLevelFlag    = "log-level"
	LogLevelDefault = "info"
	LogLevelUsage   = "debug, info, warn or error"
)

// ParseLogLevel reads --log-level's value.
func ParseLogLevel(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("invalid --%s %q: use %s", LogLevelFlag, s, LogLevelUsage)
	}
	return level, nil
}

// ParseFlags adds --log-level to fs, parses args and returns the logger
// at that level, writing to w.
func ParseFlags(fs *flag.FlagSet, args []string, w io.Writer) (*slog.Logger, error) {
	value := fs.String(LogLevelFlag, LogLevelDefault, LogLevelUsage)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	level, err := ParseLogLevel(*value)
	if err != nil {
		return nil, err
	}
	return Logger(w, level), nil
}

// Logger writes JSON lines to w at level.
func Logger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}
