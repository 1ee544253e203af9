"""The measured ceilings of one device: peak matrix rate per dtype and memory bandwidth.

:class:`Ceilings` (with :class:`KernelPeak` and :class:`Theoretical`) is the ``ceilings``
document, a contract between commands; it lives in :mod:`accelscope.documents` and is
re-exported here for the roofline package. Build one with keywords, store it with
``model_dump(mode="json")``, read one with ``Ceilings.from_payload(payload, what)`` (a missing
or malformed key is a one-line :class:`~accelscope.errors.BadInputError` that names it).
"""

from __future__ import annotations

from accelscope.documents import CPU_DTYPES, DTYPES, Ceilings, KernelPeak, Theoretical

__all__ = ["CPU_DTYPES", "DTYPES", "Ceilings", "KernelPeak", "Theoretical"]
