#!/usr/bin/env bash
# examples/loaded-runs.sh -- run each correct example engine N times under
# `deliverysim chaos` on a loaded machine, and report per run the verdict,
# the load average and the time taken, then the passes per engine.
#
# Not a timed test (it takes N x engines x ~70 s: over 20 minutes at the
# defaults); issue 37 asks that both examples pass 10 of 10 like this.
#
# usage: examples/loaded-runs.sh [-n N] [--busy PATH|none] [--burners K]
#            [--duration D] [--kills K] [--snapshots MODE] [--out DIR] [ENGINE...]
#   ENGINE      python, node (default: both)
#   -n N        runs per engine (default 10; $N)
#   --busy PATH the CPU burner, run as `PATH K SECONDS` beside the runs in a
#               process group of its own (default $BUSY, else
#               ../shared/tools/busy from the checkout's root if present);
#               `none` runs without one
#   --burners K burners it starts (default 4; $BURNERS)
#   --duration D, --kills K   chaos's fault phase and kills (default 60s, 10)
#   --snapshots MODE  chaos's --snapshots: declared (default: both examples
#               serve snapshot sources) or none
#   --out DIR   where each run's JSON report and stderr are kept (default a
#               new temporary directory, printed)
#   $DSIM       a built deliverysim binary (default: go build into a
#               temporary directory)
#   $DELIVERYSIM_PG_DSN  as for chaos (default the local server)
#
# Exit 0 when every run passed, 1 otherwise, 2 on bad usage. Everything the
# script starts (the burner's group, the chaos run in progress, the
# temporary build) is stopped and removed when it ends, however it ends.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
runs=${N:-10}
busy=${BUSY:-}
burners=${BURNERS:-4}
duration=60s
kills=10
snapshots=declared
out=""
engines=()

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
	case "$1" in
	-n) runs=${2:?}; shift 2 ;;
	--busy) busy=${2:?}; shift 2 ;;
	--burners) burners=${2:?}; shift 2 ;;
	--duration) duration=${2:?}; shift 2 ;;
	--kills) kills=${2:?}; shift 2 ;;
	--snapshots) snapshots=${2:?}; shift 2 ;;
	--out) out=${2:?}; shift 2 ;;
	-h | --help) usage ;;
	python | node) engines+=("$1"); shift ;;
	*) echo "loaded-runs: unknown argument $1" >&2; usage ;;
	esac
done
[ ${#engines[@]} -gt 0 ] || engines=(python node)
case "$runs" in '' | *[!0-9]* | 0) echo "loaded-runs: -n wants a positive count" >&2; exit 2 ;; esac
case "$kills" in '' | *[!0-9]*) echo "loaded-runs: --kills wants a count" >&2; exit 2 ;; esac
case "$snapshots" in declared | none) ;; *) echo "loaded-runs: --snapshots wants declared or none" >&2; exit 2 ;; esac

if [ -z "$busy" ] && [ -x "$root/../shared/tools/busy" ]; then
	busy="$root/../shared/tools/busy"
fi
if [ -z "$busy" ]; then
	echo "loaded-runs: no CPU burner (--busy PATH, or ../shared/tools/busy beside the checkout); say --busy none to run unloaded" >&2
	exit 2
fi
if [ "$busy" != none ] && [ ! -x "$busy" ]; then
	echo "loaded-runs: $busy is not executable" >&2
	exit 2
fi

engine_cmd() {
	case "$1" in
	python) command -v python3 >/dev/null && echo "python3 $root/examples/engine-python/engine.py" ;;
	node) command -v node >/dev/null && echo "node $root/examples/engine-node/engine.js" ;;
	esac
}
for e in "${engines[@]}"; do
	if [ -z "$(engine_cmd "$e")" ]; then
		echo "loaded-runs: $e is not installed" >&2
		exit 2
	fi
done
case "$root" in *' '*) echo "loaded-runs: the checkout's path has a space; chaos splits --engine-cmd on spaces" >&2; exit 2 ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/loaded-runs.XXXXXX")
[ -n "$out" ] || out="$work/reports"
mkdir -p "$out"
case "$out" in "$work"/*) keep_out=0 ;; *) keep_out=1 ;; esac

busy_pid=""
chaos_pid=""
cleanup() {
	trap - EXIT INT TERM
	if [ -n "$chaos_pid" ] && kill -0 "$chaos_pid" 2>/dev/null; then
		# chaos stops its engine, servers and schema on SIGTERM.
		kill -TERM "$chaos_pid" 2>/dev/null
		wait "$chaos_pid" 2>/dev/null
	fi
	if [ -n "$busy_pid" ]; then
		# The burner's own group: its shell, its sleep and its burners.
		kill -TERM -- "-$busy_pid" 2>/dev/null
		wait "$busy_pid" 2>/dev/null
	fi
	if [ "$keep_out" = 0 ]; then
		# Reports under the temporary directory are kept only if a run failed.
		if [ "${failed_any:-0}" = 1 ]; then
			mv "$out" "${TMPDIR:-/tmp}/loaded-runs-reports.$$" && echo "reports kept in ${TMPDIR:-/tmp}/loaded-runs-reports.$$"
		fi
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "loaded-runs: interrupted" >&2; exit 130' INT TERM

dsim=${DSIM:-}
if [ -z "$dsim" ]; then
	echo "building deliverysim ..."
	(cd "$root" && go build -o "$work/deliverysim" ./cmd/deliverysim) || exit 2
	dsim="$work/deliverysim"
fi

seconds() { # a Go duration of whole s/m/h, roughly, for the burner's length
	local d=$1 s=0
	[[ $d =~ ([0-9]+)h ]] && s=$((s + BASH_REMATCH[1] * 3600))
	[[ $d =~ ([0-9]+)m([0-9]|$) ]] && s=$((s + BASH_REMATCH[1] * 60))
	[[ $d =~ ([0-9]+)s$ ]] && s=$((s + BASH_REMATCH[1]))
	[ "$s" -gt 0 ] || s=60
	echo "$s"
}
if [ "$busy" != none ]; then
	# Long enough for every run with its settle; stopped at the end anyway.
	busy_secs=$((runs * ${#engines[@]} * ($(seconds "$duration") + 120)))
	# setsid: the burner and its children get a group of their own to stop.
	setsid "$busy" "$burners" "$busy_secs" >"$work/busy.log" 2>&1 &
	busy_pid=$!
	sleep 5 # let the load build
fi

load1() { cut -d' ' -f1 /proc/loadavg; }

echo "engines: ${engines[*]}; $runs runs each of chaos --duration $duration --kills $kills --snapshots $snapshots; burner: $busy ($burners); reports in $out"
printf '%-7s %-6s %-5s %-28s %8s  %s\n' engine run verdict "load 1m: start/mean/max" took "failing invariants"
declare -A passes
failed_any=0
for e in "${engines[@]}"; do
	passes[$e]=0
	cmd=$(engine_cmd "$e")
	for i in $(seq 1 "$runs"); do
		rep="$out/$e-$i.json"
		start=$(date +%s.%N)
		l0=$(load1)
		"$dsim" chaos --duration "$duration" --kills "$kills" --snapshots "$snapshots" --json --engine-cmd "$cmd" >"$rep" 2>"$out/$e-$i.stderr" &
		chaos_pid=$!
		samples=("$l0")
		while kill -0 "$chaos_pid" 2>/dev/null; do
			sleep 2
			samples+=("$(load1)")
		done
		wait "$chaos_pid"
		code=$?
		chaos_pid=""
		took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1fs", b - a }')
		stats=$(printf '%s\n' "${samples[@]}" | awk -v f="$l0" '{ s += $1; if ($1 > m) m = $1 } END { printf "%s/%.2f/%.2f", f, s / NR, m }')
		# The invariants map's FAIL entries ("verdicts" repeats them as
		# "verdict": "FAIL").
		bad=$(grep -o '"[a-z-]*": *"FAIL"' "$rep" 2>/dev/null | cut -d'"' -f2 | grep -vx verdict | sort -u | paste -sd, -)
		case $code in
		0) verdict=PASS; passes[$e]=$((passes[$e] + 1)) ;;
		1) verdict=FAIL; failed_any=1 ;;
		*) verdict="ERR$code"; failed_any=1; bad="exit $code: $(tail -n 1 "$out/$e-$i.stderr")" ;;
		esac
		printf '%-7s %-6s %-5s %-28s %8s  %s\n' "$e" "$i/$runs" "$verdict" "$stats" "$took" "$bad"
	done
done
echo "summary:"
for e in "${engines[@]}"; do
	echo "  $e: ${passes[$e]}/$runs passed"
done
exit "$failed_any"
