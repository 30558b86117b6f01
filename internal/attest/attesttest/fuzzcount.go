package attesttest

import (
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
)

var execs atomic.Int64

// CountExec counts one execution of a fuzz target. With
// $CLOISTER_FUZZ_COUNT set to a directory, each fuzzing worker process
// keeps its running total in a file named by its pid (rewritten every 256
// executions), so `make fuzz` can report executions that go test's own
// counter shows only when a slow target's worker finishes a batch.
func CountExec() {
	n := execs.Add(1)
	dir := os.Getenv("CLOISTER_FUZZ_COUNT")
	if dir == "" || n%256 != 0 {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())), []byte(strconv.FormatInt(n, 10)), 0o644) //nolint:gosec // a counter for the fuzz report, nothing secret
}
