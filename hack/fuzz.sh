#!/usr/bin/env bash
# Runs every fuzz target, two at a time (one worker each: two cores), and
# reports the executions each made, counted inside the target
# (attesttest.CountExec) where it counts them, else go test's own count.
# FUZZTIME (default 2m) is each target's time; the parsers of CAS's
# requests and of policies, the widest doors, get LONGFUZZTIME (10m).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-2m}
longtime=${LONGFUZZTIME:-10m}
jobs=${FUZZJOBS:-2}
go=${GO:-go}
export go
long=" internal/cas/api:FuzzAPI internal/cas/policy:FuzzParse "

one() { # pkg dir target time
	local pkg=$1 dir=$2 target=$3 time=$4 counts start total secs status=ok
	counts=$(mktemp -d)
	start=$(date +%s)
	# Build first, so the time is the fuzzer's.
	"$go" test -C "$dir" -c -o "$counts/test" . >"$counts/log" 2>&1 || status=FAIL
	# Minimizing a new input may take a minute of the fuzzing time (no
	# executions counted meanwhile); a few seconds of it are enough here.
	if [ $status = ok ] && ! (cd "$dir" && CLOISTER_FUZZ_COUNT=$counts "$counts/test" \
		-test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$time" -test.fuzzminimizetime 5s -test.parallel 1 \
		-test.fuzzcachedir "$counts/cache") >>"$counts/log" 2>&1; then
		status=FAIL
	fi
	total=0
	for f in "$counts"/[0-9]*; do [ -e "$f" ] && total=$((total + $(cat "$f"))); done
	if [ "$total" = 0 ]; then # not counted inside: go test's last line
		total=$(grep -o 'execs: [0-9]*' "$counts/log" | tail -1 | grep -o '[0-9]*' || echo 0)
	fi
	secs=$(( $(date +%s) - start ))
	printf '%-4s %-44s %-22s %12d execs in %4ds (%d/s)\n' "$status" "${pkg#github.com/cloister-cc/cloister/}" "$target" "$total" "$secs" $((total / (secs > 0 ? secs : 1)))
	if [ $status = FAIL ]; then tail -30 "$counts/log" | sed 's/^/    /'; fi
	rm -rf "$counts"
	[ $status = ok ]
}
export -f one

list=$(mktemp)
trap 'rm -f "$list"' EXIT
# The project's packages, and the agent policy's tests (a module of their own).
for pkg in $("$go" list ./internal/...) $("$go" -C test/agentpolicy list ./...); do
	dir=$("$go" list -f '{{.Dir}}' "$pkg" 2>/dev/null || "$go" -C test/agentpolicy list -f '{{.Dir}}' "$pkg")
	short=${pkg#github.com/cloister-cc/cloister/}
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		time=$fuzztime first=1
		case "$long" in *" $short:$target "*) time=$longtime first=0 ;; esac
		echo "$first $pkg $dir $target $time" >>"$list"
	done
done
echo "$(wc -l <"$list") fuzz targets, $jobs at a time: $fuzztime each, $longtime for$long"
# The long ones first, so the two cores stay busy to the end.
sort -n -s -k1,1 "$list" | cut -d' ' -f2- | xargs -P "$jobs" -L 1 bash -c 'one "$@"' _
