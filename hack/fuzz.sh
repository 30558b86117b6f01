#!/usr/bin/env bash
# Runs every fuzz target for FUZZTIME (default 60s) and reports the
# executions each made, counted inside the target (attesttest.CountExec):
# go test's own counter lags by whole worker batches on slow targets.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-60s}
go=${GO:-go}
fail=0
for pkg in $("$go" list ./internal/...); do
	dir=$("$go" list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		counts=$(mktemp -d)
		start=$(date +%s)
		if ! CLOISTER_FUZZ_COUNT=$counts "$go" test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" >"$counts/log" 2>&1; then
			echo "FAIL $pkg $target"; tail -20 "$counts/log"; fail=1
		fi
		total=0
		for f in "$counts"/[0-9]*; do [ -e "$f" ] && total=$((total + $(cat "$f"))); done
		secs=$(( $(date +%s) - start ))
		printf '%-50s %-18s %10d execs in %3ds (%d/s)\n' "${pkg#github.com/cloister-cc/cloister/}" "$target" "$total" "$secs" $((total / (secs > 0 ? secs : 1)))
		rm -rf "$counts"
	done
done
exit $fail
