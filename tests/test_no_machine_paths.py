"""The suite runs from any clone on any machine: no test file (nor a shipped fake) names an
absolute path outside the repository and the temporary directory. A test that needs the CLI finds
it as a user's shell would, beside the interpreter running the suite (``sys.executable``); a
test that needs a file makes it under ``tmp_path``.

A string literal counts as a machine path when it is absolute and its first component is a
place where one machine's checkouts, homes or installs live (``/work``, ``/home``, ``/root``,
``/opt``, ...), or any other top-level directory that exists here and is not one of the
operating system's own (``/proc``, ``/usr``, ``/tmp``, ...). URL paths such as
``/v1/completions`` name no directory and pass.

Covers: accelscope.testing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = [ROOT / "tests", ROOT / "src" / "accelscope" / "testing"]

# where one machine's files live: never in a test, whether or not this machine has them
MACHINE_ROOTS = {"work", "home", "root", "Users", "opt", "mnt", "media", "srv", "scratch", "data"}
# the operating system's own: the same on every Linux machine a test runs on
SYSTEM_ROOTS = {"proc", "sys", "dev", "usr", "etc", "bin", "sbin", "lib", "lib64", "tmp", "run"}


def machine_path(text: str) -> bool:
    """Whether ``text`` is an absolute path into one machine's files."""
    if not text.startswith("/") or text.startswith("//") or any(c.isspace() for c in text):
        return False
    first = text[1:].split("/", 1)[0]
    if not first or first in SYSTEM_ROOTS:
        return False
    if first in MACHINE_ROOTS:
        return True
    return (Path("/") / first).is_dir()


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_test_file_names_a_machine_path() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for folder in SCANNED
        for path in sorted(folder.rglob("*.py"))
        if path != Path(__file__).resolve()  # the rule's own examples below
        for line, text in _literals(path)
        if machine_path(text)
    ]
    assert not found, "absolute paths into one machine's files:\n" + "\n".join(found)


def test_the_rule_tells_machine_paths_from_urls_and_system_files() -> None:
    assert machine_path("/work/main/.venv/bin/accelscope")
    assert machine_path("/home/ci/project/tests/data/x.json")
    assert machine_path("/root/.cache/accelscope")
    assert machine_path("/srv/checkouts/accelscope/tests/test_x.py")
    assert not machine_path("/v1/chat/completions")
    assert not machine_path("/metrics")
    assert not machine_path("/proc/meminfo")
    assert not machine_path("/usr/bin/chromium")
    assert not machine_path("/tmp/x")
    assert not machine_path("relative/path")
    assert not machine_path("/ a sentence")
