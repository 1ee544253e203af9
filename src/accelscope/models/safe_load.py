"""Loading pickled checkpoints without running code from them.

``torch.load(weights_only=True)`` only rebuilds tensors and plain containers; anything else
(a whole pickled ``nn.Module``, or a pickle that calls ``os.system``) fails there, and is then
refused with a clear message unless the user passed ``--trust-model-code``.
``torch.export.load`` falls back to full unpickling internally, so it is wrapped to forbid that.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accelscope.errors import ModelLoadError, UnsafeModelError, exception_line

__all__ = ["load_checkpoint", "load_state_dict", "no_unpickling", "read_safetensors"]

TRUST_HINT = "pass --trust-model-code only if you trust whoever made this file"


def load_checkpoint(path: Path, *, trust_model_code: bool = False) -> Any:
    """Load a torch checkpoint; only tensors and containers unless ``trust_model_code``."""
    import torch

    if not path.is_file():
        raise ModelLoadError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if not trust_model_code:
            raise UnsafeModelError(
                f"refusing to unpickle {path}: it holds objects beyond tensors, and loading "
                f"them would run code from the file ({exception_line(exc)[:120]}); {TRUST_HINT}"
            ) from exc
    except (RuntimeError, EOFError, ValueError, zipfile.BadZipFile, OSError) as exc:
        raise ModelLoadError(
            f"{path} is not a readable torch checkpoint: {exception_line(exc)}"
        ) from exc
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise ModelLoadError(f"cannot load {path}: {exception_line(exc)}") from exc


def read_safetensors(path: Path) -> dict[str, Any]:
    """Tensors from a ``.safetensors`` file (a format that cannot carry code)."""
    try:
        from safetensors.torch import load_file
    except ImportError as exc:
        raise ModelLoadError(
            f"{path} is a safetensors file but the safetensors package is not installed"
        ) from exc
    try:
        return dict(load_file(str(path), device="cpu"))
    except Exception as exc:
        raise ModelLoadError(
            f"{path} is not a valid safetensors file: {exception_line(exc)}"
        ) from exc


def load_state_dict(path: Path, *, trust_model_code: bool = False) -> dict[str, Any]:
    """A state dict from ``.safetensors`` or a torch checkpoint (unwrapping common wrappers)."""
    import torch

    if path.suffix == ".safetensors":
        return read_safetensors(path)
    loaded = load_checkpoint(path, trust_model_code=trust_model_code)
    if isinstance(loaded, torch.nn.Module):
        return dict(loaded.state_dict())
    if isinstance(loaded, dict):
        for wrapper in ("state_dict", "model_state_dict", "model"):
            inner = loaded.get(wrapper)
            if isinstance(inner, dict):
                loaded = inner
                break
        if loaded and all(isinstance(v, torch.Tensor) for v in loaded.values()):
            return dict(loaded)
    raise ModelLoadError(f"{path} does not hold a state dict (a mapping of names to tensors)")


class _RefusingPickle:
    """Stand-in for the ``pickle`` module that refuses to deserialise."""

    def __getattr__(self, name: str) -> Any:
        return getattr(pickle, name)

    @staticmethod
    def loads(*args: Any, **kwargs: Any) -> Any:
        raise UnsafeModelError(
            f"refusing to unpickle an object inside this .pt2 program; {TRUST_HINT}"
        )


@contextmanager
def no_unpickling() -> Iterator[None]:
    """Within the block, ``torch.load`` is forced to ``weights_only=True`` and the torch.export
    archive reader cannot fall back to plain ``pickle``: loading a .pt2 runs no code from it."""
    import torch
    import torch.export.pt2_archive._package as package

    original_load = torch.load
    original_pickle = getattr(package, "pickle", None)

    def weights_only_load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        try:
            return original_load(*args, **kwargs)
        except pickle.UnpicklingError as exc:
            raise UnsafeModelError(
                "refusing to unpickle an object inside this .pt2 program "
                f"({exception_line(exc)[:120]}); {TRUST_HINT}"
            ) from exc

    def refuse_script_object(*args: Any, **kwargs: Any) -> Any:
        raise UnsafeModelError(
            f"refusing to load a TorchScript object inside this .pt2 program; {TRUST_HINT}"
        )

    original_script_load = getattr(torch._C, "_pickle_load_obj", None)
    torch.load = weights_only_load
    if original_script_load is not None:
        torch._C._pickle_load_obj = refuse_script_object
    if original_pickle is not None:
        setattr(package, "pickle", _RefusingPickle())  # noqa: B010 - module attribute swap
    try:
        yield
    finally:
        torch.load = original_load
        if original_script_load is not None:
            torch._C._pickle_load_obj = original_script_load
        if original_pickle is not None:
            setattr(package, "pickle", original_pickle)  # noqa: B010
