#!/usr/bin/env bash
# Here, before the device call (no device time): download wheels.txt's wheels into .whl/ at the
# repository root, which git ignores (.git/info/exclude) and the device call carries.
set -eu
cd "$(dirname "$0")/../.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
rm -rf .whl # one version of each: two stop the install there
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d .whl -r benchmarks/gpu/wheels.txt
ls -1 .whl
du -sh .whl
git status --porcelain --ignored .whl | head -1
