"""User models from Python factories: ``path/to/file.py:make_model`` or ``package.module:fn``.

A factory is code the user wrote and pointed accelscope at, so running it is the point; what
accelscope refuses to run is code hidden in data files (see ``safe_load``).
"""

from __future__ import annotations

import hashlib
import importlib
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelscope.errors import ModelLoadError, exception_line

__all__ = ["is_factory_ref", "resolve_factory"]

_MODULE_REF = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_]\w*$")


def is_factory_ref(ref: str) -> bool:
    """True for ``file.py:fn`` and ``package.module:fn`` references."""
    return (".py:" in ref and not ref.endswith(".py:")) or bool(_MODULE_REF.match(ref))


def _load_file_module(path: Path) -> tuple[Any, bytes]:
    """The module of the user's file, run from the bytes read here (also the digest's): never
    from a cached ``.pyc``, which Python trusts by mtime and size and so can run a file as it was
    before an edit of the same length within one second; nothing is written beside the file."""
    if not path.is_file():
        raise ModelLoadError(f"model file {path} does not exist")
    source = path.read_bytes()
    name = "accelscope_user_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)  # the user's own model file
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ModelLoadError(
            f"importing {path} failed: {type(exc).__name__}: {exception_line(exc)}"
        ) from exc
    return module, source


def resolve_factory(ref: str) -> tuple[Callable[[], Any], str]:
    """The factory function and a digest of its source (file content + function name)."""
    target, _, function_name = ref.rpartition(":")
    if target.endswith(".py"):
        module, digest_source = _load_file_module(Path(target))
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ModelLoadError(f"cannot import module {target!r}: {exception_line(exc)}") from exc
        except Exception as exc:
            raise ModelLoadError(
                f"importing {target!r} failed: {type(exc).__name__}: {exception_line(exc)}"
            ) from exc
        file = getattr(module, "__file__", None)
        digest_source = Path(file).read_bytes() if file else target.encode()
    factory = getattr(module, function_name, None)
    if factory is None or not callable(factory):
        raise ModelLoadError(f"{target} has no callable named {function_name!r}")
    digest = hashlib.sha256(digest_source + b":" + function_name.encode()).hexdigest()[:16]
    return factory, digest
