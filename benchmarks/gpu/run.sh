#!/usr/bin/env bash
# On the lent GPU machine: install the carried wheels (.whl/), then run the validation.
# benchmarks/gpu/README.md gives the device tool calls. Arguments go to validate.py
# (--only STEP,..., --budget SECONDS, --list).
set -u
cd "$(dirname "$0")/../.." || exit 1
if [ -d /tmp/site/pydantic ] && [ -d /tmp/site/plotly ]; then
  : # a warm machine: installed by the previous call
elif compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl ||
    echo "run.sh: the wheels did not install: steps that need pydantic or plotly will fail" >&2
else
  echo "run.sh: no .whl/ here: carry it (benchmarks/gpu/README.md); continuing without" >&2
fi
export PYTHONPATH="$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export VALIDATE_COMMAND="bash benchmarks/gpu/run.sh${*:+ $*}"
exec python3 benchmarks/gpu/validate.py "$@"
