# Sourced by the GPU check scripts (gpu-graphs.sh, gpu-enqueue.sh): stamp,
# and step, which runs one check, appends its output to $STEPLOG, shows
# its telling lines and counts failures in $fails.
# shellcheck shell=bash
T0=$(date +%s)
stamp() { echo "== $(($(date +%s) - T0))s $*"; }
fails=0
# step NAME CMD...: PASS on exit 0 with no FAILED, SLOW or WRONG line and
# no non-zero "Out of bounds" (#wrong) count.
step() {
	local name=$1 out rc wrong
	shift
	out=$("$@" 2>&1)
	rc=$?
	{ echo "== $name"; echo "$out"; } >>"$STEPLOG"
	echo "$out" | grep -E "Out of bounds|Avg bus|SLOW|WRONG|ENQUEUE rank 0 .* iter 1|error|Error|FAIL|PASS|GRAPH-END|^flexrun:" | cut -c1-300 | tail -8
	wrong=$(echo "$out" | grep -E "^# Out of bounds values" | grep -vE ": 0 OK" | head -1)
	if [ $rc -eq 0 ] && ! echo "$out" | grep -qE "FAILED|^SLOW|^WRONG" && [ -z "$wrong" ]; then
		echo "PASS $name"
	else
		echo "FAIL $name (exit $rc)"
		fails=$((fails + 1))
	fi
}
