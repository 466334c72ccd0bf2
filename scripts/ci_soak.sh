#!/usr/bin/env bash
# ci_soak.sh N [--hog] [--keep]: run `make test` in N fresh clones of HEAD, one after another, as CI
# does (a clean clone with ../shared beside it), and report each run's exit status, wall time and
# failing tests. --hog keeps one core busy with a CPU-bound loop for the whole run (CI machines are
# rarely quiet); --keep leaves the clones (under $TMPDIR) for inspection.
# Last line: `ci_soak: N runs, K green, slowest M:SS`.
set -uo pipefail

usage() { echo "usage: $0 N [--hog] [--keep]" >&2; exit 2; }
[[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || usage
runs=$1; shift
hog=0; keep=0
for arg in "$@"; do
	case $arg in
		--hog) hog=1 ;;
		--keep) keep=1 ;;
		*) usage ;;
	esac
done

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
shared=$(cd "$repo/.." && pwd)/shared
head=$(git -C "$repo" rev-parse --short HEAD)
[[ -d $shared ]] || echo "ci_soak: warning: no $shared beside the repository (tests that read it will fail)" >&2
base=$(mktemp -d "${TMPDIR:-/tmp}/ci_soak.XXXXXX")
hog_pid=""
run_pid=""

# A stopped soak stops its run too: each `make test` runs in its own process group, which gets
# SIGINT and, if still there after 60 s, SIGKILL (before, pytest and its workers ran on). Servers the
# tests started in their own sessions (Prometheus, Redis, the stack's daemons) can still outlive a
# pytest that is killed before its fixtures' teardown: check `pgrep -f pytest-of-` after a kill.
stop_run() {
	[[ -n $run_pid ]] || return 0
	kill -INT -- -"$run_pid" 2>/dev/null
	for _ in $(seq 60); do
		kill -0 -- -"$run_pid" 2>/dev/null || break
		sleep 1
	done
	kill -KILL -- -"$run_pid" 2>/dev/null
	run_pid=""
}

cleanup() {
	stop_run
	[[ -n $hog_pid ]] && kill "$hog_pid" 2>/dev/null
	[[ $keep == 1 ]] || rm -rf "$base"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ $hog == 1 ]]; then
	# One busy core for the whole soak; `exec` so that killing $hog_pid stops the loop itself.
	bash -c 'exec python3 -c "while True: pass"' &
	hog_pid=$!
fi

green=0; slowest=0
echo "ci_soak: $runs run(s) of make test on fresh clones of $head$([[ $hog == 1 ]] && echo ', one core hogged'); in $base"
for i in $(seq 1 "$runs"); do
	dir="$base/run$i"
	mkdir -p "$dir"
	ln -s "$shared" "$dir/shared"
	git clone -q "$repo" "$dir/main"
	log="$dir/make-test.log"
	start=$(date +%s)
	# `times` after make: the CPU time of everything the run started and waited for (user + system).
	setsid bash -c 'cd "$1" && CI=true make test; rc=$?; times >"$2"; exit $rc' _ "$dir/main" "$dir/cpu" \
		>"$log" 2>&1 </dev/null &
	run_pid=$!
	wait "$run_pid"
	rc=$?
	run_pid=""
	wall=$(( $(date +%s) - start ))
	(( wall > slowest )) && slowest=$wall
	# pytest's closing line, with or without its ===== frame ("1364 passed in 384.01s (0:06:24)").
	summary=$(grep -E '^[= ]*[0-9]+ (passed|failed|errors?)\b.* in [0-9.]+s' "$log" | tail -n 1 | tr -d '=' \
		| sed 's/^ *//; s/ *$//')
	# The children's line of `times` ("5m12.310s 0m40.120s"), as whole seconds of user + system.
	cpu=$(sed -n 2p "$dir/cpu" 2>/dev/null | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%d", t }')
	printf 'run %d: exit %d, wall %d:%02d, cpu %ss, %s\n' "$i" "$rc" $((wall / 60)) $((wall % 60)) "${cpu:-?}" \
		"${summary:-no pytest summary}"
	if [[ $rc == 0 ]]; then
		green=$((green + 1))
	else
		grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /' | head -n 40
		if [[ $keep != 1 ]]; then
			kept="${TMPDIR:-/tmp}/ci_soak_${head}_run${i}.log"
			cp "$log" "$kept" && echo "    log: $kept"
		fi
	fi
	[[ $keep == 1 ]] || rm -rf "$dir"
done
printf 'ci_soak: %d runs, %d green, slowest %d:%02d\n' "$runs" "$green" $((slowest / 60)) $((slowest % 60))
[[ $green == "$runs" ]]
