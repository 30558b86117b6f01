package startup

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

type exit3 struct{}

func (exit3) Error() string { return "exit status 3" }
func (exit3) ExitCode() int { return 3 }

func TestCode(t *testing.T) {
	for _, tt := range []struct {
		err     error
		code    int
		printed string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{fmt.Errorf("parsing: %w", flag.ErrHelp), 0, ""},
		{fmt.Errorf("verifying: %w", exit3{}), 3, ""},
		{errors.New("listening on :1: permission denied"), 1, "cloister-las: listening on :1: permission denied\n"},
		{context.Canceled, 1, "cloister-las: context canceled\n"},
	} {
		var out bytes.Buffer
		if code := Code("cloister-las", tt.err, &out); code != tt.code || out.String() != tt.printed {
			t.Errorf("Code(%v) = %d, printed %q; want %d, %q", tt.err, code, out.String(), tt.code, tt.printed)
		}
	}
}

func TestLogLevel(t *testing.T) {
	level, err := ParseLogLevel("debug")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	Logger(&out, level).Debug("hello", "k", "v")
	if !strings.Contains(out.String(), `"msg":"hello"`) || !strings.Contains(out.String(), `"level":"DEBUG"`) {
		t.Errorf("debug line not logged as JSON: %q", out.String())
	}
	var quiet bytes.Buffer
	Logger(&quiet, slog.LevelInfo).Debug("hidden")
	if quiet.Len() != 0 {
		t.Errorf("debug line logged at info: %q", quiet.String())
	}
	if _, err := ParseLogLevel("loud"); err == nil || err.Error() != `invalid --log-level "loud": use debug, info, warn or error` {
		t.Errorf("bad level: %v", err)
	}
}

func TestParseFlags(t *testing.T) {
	var out bytes.Buffer
	log, err := ParseFlags(flag.NewFlagSet("x", flag.ContinueOnError), []string{"--log-level=warn"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown")
	if strings.Contains(out.String(), "hidden") || !strings.Contains(out.String(), "shown") {
		t.Errorf("--log-level=warn logged %q", out.String())
	}
	if _, err := ParseFlags(flag.NewFlagSet("x", flag.ContinueOnError), []string{"--log-level=loud"}, &out); err == nil {
		t.Error("--log-level=loud accepted")
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	if _, err := ParseFlags(fs, []string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp (exit 0)", err)
	}
}
