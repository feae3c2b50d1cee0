#!/usr/bin/env bash
# The README's two commands, each from a fresh clone of this checkout, timed as a new user
# waits for them: clone -> labelled components, and clone -> green tests.
#
#   bash benchmarks/fresh_machine.sh [PREFIX]
#
# Two clones, PREFIX-main-job/ and PREFIX-tests/ (default PREFIX: fresh-machine beside this
# checkout, so that ../shared/data is found next to them as in CI), each with its own .venv.
# Prints the wall time of each command, and the time pytest reports.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:-$(dirname "$src")/fresh-machine}
rm -rf "$prefix-main-job" "$prefix-tests"
git clone -q "$src" "$prefix-main-job"
git clone -q "$src" "$prefix-tests"
cd "$prefix-main-job"
t0=$(date +%s.%N)
python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/sktensor-fast fit > fit.out
t1=$(date +%s.%N)
head -3 fit.out
cd "$prefix-tests"
python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]" && .venv/bin/python -m pytest -q > pytest.out 2>&1 || { tail -30 pytest.out; exit 1; }
t2=$(date +%s.%N)
tail -1 pytest.out
echo "main job, clone -> labelled components: $(echo "$t1 - $t0" | bc) s"
echo "test command, clone -> green:           $(echo "$t2 - $t1" | bc) s"
