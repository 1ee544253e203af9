"""Every ``accelscope …`` command line that README.md and docs/**/*.md show is one the real
command line accepts, so a documented example can never again fail on its own flags (the README's
``audit --since 7d`` once did: durations had no days).

What is collected, per Markdown file (each one its own test case, its id ``file:line``):

- in fenced code blocks (no info string, or ``bash``/``sh``/``shell``/``console``/``text``/...):
  lines starting with ``accelscope `` or ``$ accelscope ``, backslash-continued lines joined. In a
  block that shows ``$`` prompts only the prompt lines are commands (the rest is their output);
- in the prose: inline code spans starting with ``accelscope ``.

Each line is shell-split with :mod:`shlex` (``# comments`` dropped); at a pipe, a redirect, ``;``
or ``&&`` only the ``accelscope`` part is kept.

How it is checked: the typer app is resolved to its click command, the sub-command path is walked
(``runs show``, ``plan api``, ...) and each level's ``make_context`` parses its arguments without
invoking anything. That runs every option's type conversion (durations such as ``7d``, sizes,
fractions, precisions, tensor specs), so an unknown option, a bad value, a missing required
argument or an unknown command fails, with the doc line in the message. Eager options:
``--help``/``--version`` print and exit 0, which passes; ``--config FILE`` reads its file while
parsing, so each case runs in an empty temporary directory where a file named by ``--config`` is
created empty (the flag and its place are checked, the file's contents are ``config.md``'s own
business). Nothing else is read or written: no model is loaded, no store is opened.

What is not parsed in full, and why (both are still checked: the sub-command path must exist and
every ``--flag`` named must be one of the command's options):

- **synopses**: lines with ``[`` ``]`` optional groups, ``…``/``...`` ellipses, ``(a | b)``
  alternatives or ``<PLACEHOLDER>`` tokens (the Flags sections). They describe, they are not
  commands; their indented continuation lines are joined for the flag check. The set is small
  and each one is a synopsis (``test_synopses_are_few_and_are_synopses``).
- **flag references in prose**: an inline span such as ``accelscope plan --traffic`` that names a
  flag without its value, a command without its required argument (``accelscope doctor
  --what-if bf16``) or a group without its sub-command (``accelscope runs``). It is a reference,
  not a command; it is recognised only by the parser's own "missing value/argument/command" error,
  so a wrong value or an unknown flag in a span still fails.

A command (not a synopsis) that goes on in an indented line without a trailing backslash fails:
a shell would run its first line alone. Upper-case placeholders (``URL``, ``MODEL``, ``M``,
``RUN``, ``ID``, ``HEAD:6379``) are kept as written: where the flag takes text they parse as text,
and where they would not, the line is a synopsis and says so with brackets.

Limits: a flag declared as plain text whose value the command's body parses (``llm --slo``,
``plan --traffic``, ``doctor --what-if`` ...) is checked here for its name and presence only;
giving it a click type (``cli/_types.py``) brings its values under this test. Lines where
``accelscope`` follows another word (``timeout 300 accelscope ...``) are not collected.

Covers: accelscope.cli.
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

import accelscope.cli
from accelscope.errors import AccelscopeError

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_SHELL_FENCES = {"", "bash", "sh", "shell", "console", "shell-session", "zsh", "text", "plain"}
_INLINE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
_STOP_TOKENS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>>", "&>", "2>&1"}
_SYNOPSIS = re.compile(r"[\[\]…]|\.\.\.|^<[\w-]+>$|^\(|\)$|^\|$")
_COMMENT = re.compile(r"\s+#.*$")


@dataclass(frozen=True)
class DocLine:
    """One documented command line."""

    path: str  # relative to the repository root
    line: int
    text: str  # as written, continuation lines joined, without the "$ " prompt
    inline: bool  # an inline code span in prose (not a fenced block)
    unbroken: bool = False  # goes on in indented lines that no backslash joins
    n: int = 0  # the how-manieth command on its line (inline spans), from 0

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}" + (f"#{self.n + 1}" if self.n else "")

    @property
    def synopsis(self) -> bool:
        """Brackets, ellipses, ``(a | b)`` alternatives or ``<PLACEHOLDER>``s outside comments."""
        return any(_SYNOPSIS.search(token) for token in shlex.split(self.text, comments=True))


def _command_text(line: str) -> str | None:
    stripped = line.strip()
    if stripped.startswith("$ "):
        stripped = stripped[2:].lstrip()
    return stripped if stripped.startswith("accelscope ") else None


def _fenced(rel: str, lines: list[str], start: int, body: list[str]) -> Iterator[DocLine]:
    """The command lines of one fenced block whose first body line is line ``start``."""
    prompts = any(b.strip().startswith("$ ") for b in body)
    i = 0
    while i < len(body):
        raw = body[i]
        text = _command_text(raw)
        if text is None or (prompts and not raw.strip().startswith("$ ")):
            i += 1
            continue
        first = i
        while text.endswith("\\") and i + 1 < len(body):
            i += 1
            text = text[:-1].rstrip() + " " + body[i].strip()
        unbroken = False  # went on in indented lines without a backslash, as synopses do
        while not prompts and i + 1 < len(body) and body[i + 1][:1].isspace():
            following = body[i + 1].strip()
            if not following or following.startswith("#"):
                break
            i += 1
            text = _COMMENT.sub("", text) + " " + _COMMENT.sub("", following)
            unbroken = True
        yield DocLine(rel, start + first, text, inline=False, unbroken=unbroken)
        i += 1


def doc_lines(path: Path) -> list[DocLine]:
    """Every ``accelscope`` command line of one Markdown file."""
    rel = path.relative_to(REPO).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[DocLine] = []
    prose: list[tuple[int, str]] = []  # (line number, text) outside fences
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        marker, info = fence.group(2), fence.group(3).lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(marker):
            end += 1
        if info in _SHELL_FENCES:
            found.extend(_fenced(rel, lines, i + 2, lines[i + 1 : end]))
        prose.append((end + 1, ""))  # a fence ends a paragraph
        i = end + 1
    # inline spans may wrap across lines, never across paragraphs
    paragraph: list[tuple[int, str]] = []
    for number, text in [*prose, (len(lines) + 1, "")]:
        if text.strip():
            paragraph.append((number, text))
            continue
        if paragraph:
            joined = "\n".join(t for _, t in paragraph)
            for span in _INLINE.finditer(joined):
                command = _command_text(" ".join(span.group(2).split()))
                if command is not None:
                    number = paragraph[joined.count("\n", 0, span.start())][0]
                    n = sum(d.line == number for d in found if d.inline)
                    found.append(DocLine(rel, number, command, inline=True, n=n))
        paragraph = []
    return sorted(found, key=lambda d: d.line)


def argv(text: str, *, cut: bool = True) -> list[str]:
    """The arguments after ``accelscope``: shell-split, comments dropped, cut at a pipe or a
    redirect (not in a synopsis, where ``|`` separates alternatives)."""
    tokens = shlex.split(text, comments=True)
    assert tokens[0] == "accelscope", text
    args: list[str] = []
    for token in tokens[1:]:
        if cut and (token in _STOP_TOKENS or token.startswith((">", "2>", "|"))):
            break
        args.append(token)
    return args


DOCUMENTED = [d for path in DOCS for d in doc_lines(path)]
COMMANDS = [d for d in DOCUMENTED if not d.synopsis]
SYNOPSES = [d for d in DOCUMENTED if d.synopsis]
ROOT = typer.main.get_command(accelscope.cli.app)


def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def parse(args: list[str]) -> list[str]:
    """Parse ``accelscope *args`` as the CLI does, invoking nothing; returns the command path."""
    command: Any = ROOT
    name: str | None = "accelscope"
    parent: Any = None
    path: list[str] = []
    while True:
        ctx: Any = command.make_context(name, list(args), parent=parent)
        if not _is_group(command):
            return path
        protected = getattr(ctx, "_protected_args", None)  # click >= 8.2; before: protected_args
        rest = [*(ctx.protected_args if protected is None else protected), *ctx.args]
        if not rest:
            if not command.invoke_without_command:
                ctx.fail("Missing command.")
            return path
        name, command, args = command.resolve_command(ctx, rest)
        parent = ctx
        path.append(str(name))


def _options(command: Any) -> dict[str, Any]:
    return {opt: p for p in command.params for opt in (*p.opts, *p.secondary_opts)}


def _takes_value(param: Any, flag: str) -> bool:
    return flag in param.opts and not getattr(param, "is_flag", False) and param.nargs != 0


def check_names(args: list[str]) -> list[str]:
    """The weaker check: the command path exists and every flag named is an option of the
    command it is given to. Returns the problems found."""
    command: Any = ROOT
    path: list[str] = []
    tokens = [t.strip("[]()") for t in args]
    tokens = [t for t in tokens if t not in ("", "|", "...", "…")]
    problems = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            break  # what follows belongs to the user's script
        flag = token.split("=", 1)[0]
        if re.fullmatch(r"--?[A-Za-z][\w-]*", flag):
            param = _options(command).get(flag)
            if param is None:
                problems.append(f"{' '.join(['accelscope', *path])}: no option {flag}")
            elif _takes_value(param, flag) and "=" not in token:
                i += 1  # its value
        elif _is_group(command):
            sub = command.commands.get(token)
            if sub is not None:
                command, path = sub, [*path, token]
            elif re.fullmatch(r"[A-Z][A-Z0-9_]*", token):
                break  # a placeholder for the command: nothing further can be checked
            else:
                problems.append(f"no command {' '.join(['accelscope', *path, token])!r}")
                break
        i += 1
    return problems


def _missing(exc: BaseException) -> bool:
    """The parser's own "this needs more" errors: a missing argument or option value."""
    if type(exc).__name__ in ("MissingParameter", "NoArgsIsHelpError"):
        return True  # NoArgsIsHelpError: a group named without its sub-command (`accelscope runs`)
    if "Missing command" in str(exc):
        return True
    return type(exc).__name__ == "BadOptionUsage" and "requires an argument" in str(exc)


@pytest.fixture(autouse=True)
def _empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _given_files(args: list[str]) -> None:
    for flag, value in itertools.pairwise(args):
        if flag == "--config":
            target = Path(value).expanduser()
            if not target.is_absolute():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("", encoding="utf-8")


@pytest.mark.parametrize("doc", COMMANDS, ids=[d.id for d in COMMANDS])
def test_documented_command_parses(doc: DocLine) -> None:
    assert not doc.unbroken, (
        f"{doc.id}: `{doc.text}` goes on in an indented line without a trailing backslash: "
        "a shell runs only its first line"
    )
    args = argv(doc.text)
    _given_files(args)
    try:
        parse(args)
    except Exception as exc:  # noqa: BLE001 - click's usage errors and Exit, typer's, ours
        if type(exc).__name__ == "Exit" and getattr(exc, "exit_code", 1) == 0:
            return  # --help / --version
        if doc.inline and _missing(exc):
            problems = check_names(args)  # a flag reference in prose: the names must exist
            assert not problems, f"{doc.id}: `{doc.text}`: {'; '.join(problems)}"
            return
        message = exc.message if isinstance(exc, AccelscopeError) else str(exc)
        pytest.fail(f"{doc.id}: `{doc.text}` does not parse: {type(exc).__name__}: {message}")


@pytest.mark.parametrize("doc", SYNOPSES, ids=[d.id for d in SYNOPSES])
def test_synopsis_names_real_commands_and_flags(doc: DocLine) -> None:
    problems = check_names(argv(doc.text, cut=False))
    assert not problems, f"{doc.id}: `{doc.text}`: {'; '.join(problems)}"


def test_synopses_are_few_and_are_synopses() -> None:
    """Only synopses escape the full parse; run with ``-s`` to see them."""
    for doc in SYNOPSES:
        print(f"synopsis, flags checked, not parsed in full: {doc.id}: {doc.text[:90]}")
    assert len(SYNOPSES) <= 25, [d.id for d in SYNOPSES]
    for doc in SYNOPSES:
        assert doc.synopsis
        # in prose only an ellipsis makes one (`accelscope --debug COMMAND ...`)
        assert not doc.inline or "..." in doc.text or "…" in doc.text, doc.id


def test_the_collector_finds_the_readme_examples() -> None:
    """The README's audit example (the one that failed) and a continued line are collected."""
    readme = [d.text for d in COMMANDS if d.path == "README.md"]
    assert any(argv(t)[:3] == ["audit", "--prometheus", "http://prometheus:9090"] for t in readme)
    bench = next(t for t in readme if t.startswith("accelscope bench resnet50 --batch 8"))
    assert "--confirm-rounds" in argv(bench)  # the backslash-continued line was joined
    assert argv("accelscope runs export latest --format json | jq . > out.json") == [
        "runs",
        "export",
        "latest",
        "--format",
        "json",
    ]
    assert len(COMMANDS) >= 50


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["audit", "--since", "7x"], "duration '7x' not understood"),
        (["audit", "--sinse", "7d"], "No such option"),
        (["plan", "memory"], "Missing parameter"),
        (["runs", "shwo"], "No such command"),
        (["bench", "resnet50", "--batch", "0"], "positive integer"),
        (["measure", "resnet50", "--precision", "fp33"], "unknown precision"),
        (["measure", "resnet50", "--config", "missing.toml"], "does not exist"),
    ],
)
def test_the_parse_is_strict(args: list[str], error: str, tmp_path: Path) -> None:
    """Bad values, unknown flags and commands fail while parsing; nothing runs or is written."""
    with pytest.raises(Exception) as raised:  # click's, typer's or ours
        parse(args)
    exc = raised.value
    assert error in (exc.message if isinstance(exc, AccelscopeError) else str(exc))
    assert not list(tmp_path.iterdir())


def test_the_parse_accepts_the_fixed_example() -> None:
    assert parse(["audit", "--prometheus", "http://p:9090", "--since", "7d"]) == ["audit"]
    assert parse(["plan", "memory", "c.json", "--context", "8k"]) == ["plan", "memory"]


def test_the_name_check() -> None:
    assert check_names(["plan", "[--model", "NAME", "|", "--run", "ID]", "--traffic", "x"]) == []
    assert check_names(["plan", "[--modle", "NAME]"]) == ["accelscope plan: no option --modle"]
    assert check_names(["plan", "memry"]) == ["no command 'accelscope plan memry'"]
    assert check_names(["doctor", "s.py", "--", "--anything"]) == []
