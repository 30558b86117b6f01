package toolchain

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// progressEvery is how often a build says how far it got: a cold build is
// many silent minutes otherwise.
const progressEvery = 5 * time.Second

// progress counts the packages `go build -v` names as it compiles them
// and forwards every other line (compiler errors) unchanged.
type progress struct {
	mu      sync.Mutex
	out     io.Writer
	partial []byte
	done    int
	last    string
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		line := string(p.partial[:i])
		p.partial = p.partial[i+1:]
		if isPackageLine(line) {
			p.done++
			p.last = line
			continue
		}
		_, _ = fmt.Fprintln(p.out, line)
	}
	return len(b), nil
}

// isPackageLine tells `go build -v`'s package lines (an import path, no
// spaces) from the compiler's messages.
func isPackageLine(line string) bool {
	return line != "" && !strings.ContainsAny(line, " \t:#")
}

func (p *progress) snapshot() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done, p.last
}

// progressLine is what a build prints every progressEvery: packages
// compiled of those the build must compile (total; unknown while
// negative), elapsed time, the latest one.
func progressLine(what string, done, total int, elapsed time.Duration, last string) string {
	switch {
	case total < 0:
		return fmt.Sprintf("toolchain: %s: %d packages compiled (of a total still counted), %s, latest %s",
			what, done, elapsed.Round(time.Second), last)
	case total == 0 && done == 0:
		return fmt.Sprintf("toolchain: %s: linking (the build cache holds every package), %s", what, elapsed.Round(time.Second))
	}
	// The total was counted beside the build: what it compiled first
	// may have been left out.
	total = max(total, done)
	pct := done * 100 / total
	return fmt.Sprintf("toolchain: %s: %d of %d packages compiled (%d%%), %s, latest %s",
		what, done, total, pct, elapsed.Round(time.Second), last)
}

// countPackages is how many packages building pkgs with flags must
// compile, standard library included: those go list finds stale, not
// those Go's build cache already holds (another module's build compiled
// them), which go build -v does not name; -1 when go list fails. The
// denominator of the progress lines.
func countPackages(ctx context.Context, goBin, dir string, env, flags, pkgs []string) int {
	// A command the cache holds is stale only for want of an installed
	// binary: go build takes it from the cache.
	const format = `{{if and .Stale (ne .StaleReason "not installed but available in build cache")}}stale{{end}}`
	args := append(append([]string{"list", "-deps", "-f", format}, listFlags(flags)...), pkgs...)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.Output()
	if err != nil {
		return -1
	}
	return bytes.Count(out, []byte("stale\n"))
}

// listFlags are the build flags go list takes of go build's: all but -o
// and its value.
func listFlags(flags []string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		if flags[i] == "-o" {
			i++
			continue
		}
		out = append(out, flags[i])
	}
	return out
}

// reportProgress prints a progress line every progressEvery until stop is
// closed; total is counted once, while the build already runs.
func reportProgress(w io.Writer, what string, total func() int, p *progress, stop <-chan struct{}) {
	start := time.Now()
	// Counting takes seconds on a cold cache (go list loads every
	// package): the lines start on time and show the total once known.
	counted := make(chan int, 1)
	go func() { counted <- total() }()
	n := -1
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case n = <-counted:
		case <-t.C:
			done, last := p.snapshot()
			_, _ = fmt.Fprintln(w, progressLine(what, done, n, time.Since(start), last))
		}
	}
}
