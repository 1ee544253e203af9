"""Tests findable by name (issue 39): a test file that tests one module is named after it, and one
that tests a behaviour across modules keeps its behaviour name and says which modules it covers.

Named after the module ``src/accelscope/<p1>/.../<pn>.py`` (or the package ``<p1>/.../<pn>/``)
is a file in tests/ whose folders are the module's first parts and whose name is ``test_`` and
the rest of the module's path joined by ``_``, taking in any number of those folders' names; a
leading ``_`` of a part, and a leading ``commands/`` in src, may be left out. So
``sweep/executor.py`` is tested in ``tests/sweep/test_executor.py`` or
``tests/sweep/test_sweep_executor.py``, ``commands/bench/html.py`` in
``tests/commands/bench/test_bench_html.py``, ``cli/_doctor.py`` in ``tests/cli/test_cli_doctor.py``
and ``doctor/inprocess/recorder.py`` in ``tests/doctor/test_inprocess_recorder.py``.

Any other test file ends its module docstring with a paragraph that begins ``Covers:``: the
modules it covers, separated by commas, dotted (``accelscope.sweep.executor``) or as paths
(``accelscope/sweep/executor.py``), each a module or package under src/accelscope.

Covers: accelscope."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PACKAGE = ROOT / "src" / "accelscope"


def _modules() -> set[tuple[str, ...]]:
    """Every module and package under src/accelscope as its path parts, leading ``_`` dropped."""
    found: set[tuple[str, ...]] = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts or any(p.startswith("__") for p in parts):  # the root, __main__
            continue
        found.add(tuple(p.lstrip("_") for p in parts))
    return found


MODULES = _modules()


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def named_after(folders: tuple[str, ...], stem: str, modules: set[tuple[str, ...]]) -> bool:
    """``tests/<folders>/test_<stem>.py`` is named after one of ``modules``."""
    for module in modules:
        for path in (module, module[1:] if module[0] == "commands" else ()):
            if len(path) <= len(folders) - 1 or path[: len(folders)] != folders:
                continue
            starts = range(min(len(folders), len(path) - 1) + 1)
            if any(stem == "_".join(path[k:]) for k in starts):
                return True
    return False


def covers(source: str) -> list[str] | None:
    """The names of the docstring's ``Covers:`` paragraph; ``None`` when it has none."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("Covers:"):
            paragraph = [line.strip()[len("Covers:") :]]
            for more in lines[i + 1 :]:
                if not more.strip():
                    break
                paragraph.append(more.strip())
            text = " ".join(paragraph).strip().rstrip(".")
            return [name.strip() for name in text.split(",") if name.strip()]
    return None


def resolves(name: str) -> bool:
    """``name`` (dotted or a path, from ``accelscope``) is a module or package in src/."""
    path = name.removeprefix("src/").removesuffix(".py").rstrip("/").replace("/", ".")
    if not re.fullmatch(r"accelscope(\.[A-Za-z_][A-Za-z0-9_]*)*", path):
        return False
    where = PACKAGE.joinpath(*path.split(".")[1:])
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _is_named(path: Path) -> bool:
    relative = path.relative_to(TESTS)
    return named_after(relative.parent.parts, path.stem.removeprefix("test_"), MODULES)


def test_each_test_file_is_named_after_its_module_or_says_what_it_covers() -> None:
    offending = [
        str(path.relative_to(ROOT))
        for path in _test_files()
        if not _is_named(path) and not covers(path.read_text())
    ]
    assert not offending, (
        "these test files are neither named after a module under src/accelscope nor say what they "
        "cover:\n  " + "\n  ".join(offending) + "\nIf one tests one module, `git mv` it to "
        "tests/<pkg>/test_<module>.py (or test_<pkg>_<module>.py where that basename is taken); if "
        "it tests a behaviour across modules, keep its name and end its module docstring with a "
        "paragraph 'Covers: accelscope.<pkg>.<module>, …' (see tests/test_test_names.py)."
    )


def test_covers_lines_name_modules_that_exist() -> None:
    wrong: dict[str, list[str]] = {}
    for path in _test_files():
        names = covers(path.read_text())
        if names is None:
            continue
        missing = [n for n in names if not resolves(n)] if names else ["(no module named)"]
        if missing:
            wrong[str(path.relative_to(ROOT))] = missing
    assert not wrong, (
        "these 'Covers:' lines name modules that are not under src/accelscope (a module is "
        "accelscope.<pkg>.<module> or accelscope/<pkg>/<module>.py; fix the name or drop it):\n  "
        + "\n  ".join(f"{file}: {', '.join(names)}" for file, names in wrong.items())
    )


def test_no_two_test_files_share_a_basename() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if "__pycache__" not in path.parts and path.name != "conftest.py":
            by_name[path.name].append(str(path.relative_to(ROOT)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, (
        "tests/ has no __init__.py, so pytest imports test files by basename and two files of one "
        "name clash; rename one (test_<pkg>_<module>.py):\n  "
        + "\n  ".join(f"{name}: {', '.join(sorted(paths))}" for name, paths in shared.items())
    )


@pytest.mark.parametrize(
    ("test_file", "named"),
    [
        ("sweep/test_executor.py", True),
        ("sweep/test_sweep_executor.py", True),
        ("commands/bench/test_bench_html.py", True),
        ("commands/test_lifecycle.py", True),  # commands/_lifecycle.py
        ("cli/test_cli_doctor.py", True),  # cli/_doctor.py
        ("doctor/test_inprocess_recorder.py", True),
        ("doctor/inprocess/test_recorder.py", True),
        ("doctor/test_trace_mode.py", True),  # commands/doctor/trace_mode.py
        ("test_units.py", True),
        ("sweep/test_sweep_faults.py", False),
        ("doctor/test_recorder.py", False),  # a folder left out
        ("test_executor.py", False),  # which one?
        ("load/test_sweep_executor.py", False),  # the wrong folder
    ],
)
def test_the_naming_rule(test_file: str, named: bool) -> None:
    relative = Path(test_file)
    assert named_after(relative.parent.parts, relative.stem[len("test_") :], MODULES) is named
