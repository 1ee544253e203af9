"""The on-disk ceilings cache: one JSON file per machine fingerprint, device and thread count.

Written atomically (temp file + rename). A cache file that cannot be read or validated is an
error that says how to refresh it, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

from accelscope.errors import BadInputError
from accelscope.files import write_atomic
from accelscope.roofline.ceilings import Ceilings

__all__ = ["cache_path", "load_cached", "save_cached"]


def cache_path(
    directory: Path, fingerprint: str, device: str, threads: int, device_index: int = 0
) -> Path:
    """``<directory>/<fingerprint>-<device>[N][-t<threads>].json``: threads only on CPU, the
    CUDA ordinal only when not 0 (so a machine's GPUs of different kinds each have theirs)."""
    suffix = f"-t{threads}" if device == "cpu" else ""
    ordinal = str(device_index) if device != "cpu" and device_index else ""
    return directory / f"{fingerprint}-{device}{ordinal}{suffix}.json"


def load_cached(path: Path) -> Ceilings | None:
    """The cached ceilings at ``path``; ``None`` when there is no file.

    Raises:
        BadInputError: the file is unreadable, not JSON, or not a valid ceilings document.
    """
    if not path.exists():
        return None
    refresh = "rerun with `accelscope ceilings --refresh` to re-measure"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Ceilings.from_payload(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"corrupt ceilings cache {path} ({exc}); {refresh}") from None
    except BadInputError as exc:
        raise BadInputError(f"corrupt ceilings cache {path} ({exc.message}); {refresh}") from None


def save_cached(ceilings: Ceilings, path: Path) -> Path:
    """Write ``ceilings`` to ``path`` atomically, creating the directory."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(ceilings.model_dump(mode="json"), indent=1, allow_nan=False))
    except OSError as exc:
        raise BadInputError(
            f"cannot write the ceilings cache {path}: {exc.strerror or exc}"
        ) from None
    return path
