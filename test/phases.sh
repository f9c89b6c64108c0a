#!/usr/bin/env bash
# phases.sh runs the phases of `make test` in order, each given as
# "name: command", stops at the first that fails, and prints every phase's
# wall time at the end (also after a failure), so a slow CI run shows where
# its time went. Exit status: the failing phase's, else 0.
set -uo pipefail
names=() times=() results=()
rc=0
for phase in "$@"; do
	name=${phase%%: *} cmd=${phase#*: }
	echo "== phase ${name}: ${cmd}"
	start=$(date +%s)
	bash -c "${cmd}"
	rc=$?
	names+=("${name}") times+=($(($(date +%s) - start)))
	if [[ ${rc} != 0 ]]; then
		results+=("FAILED (exit ${rc})")
		break
	fi
	results+=(ok)
done
total=0
echo "== phase times"
for i in "${!names[@]}"; do
	printf '%-12s %6ds  %s\n' "${names[i]}" "${times[i]}" "${results[i]}"
	total=$((total + times[i]))
done
printf '%-12s %6ds\n' total "${total}"
exit "${rc}"
