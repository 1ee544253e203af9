"""Groups of flags declared once and taken whole by the commands that share them.

A group is a frozen dataclass whose fields carry their typer option (:func:`flag`). A command
names the group as one parameter (``workload: WorkloadFlags = GROUP``); :func:`with_flag_groups`
rewrites the command's signature so typer sees each field as its own flag, and hands the
command one built group. The flag's name, parser, help and default live in the group alone,
and so does what the flags mean together (a method of the group), so two commands that share
a flag cannot drift apart. A group may extend another (``OutputFlags`` is the store, the report
and ``--json``): its flags are the other's own fields, still declared once. A group made of
several lists them last-first (``class OutputFlags(JsonFlags, ReportFlags, StoringFlags)`` has
``--store``, ``--no-store``, ``--report``, ``--json``, in that order): a dataclass takes its
fields from the last base first.

The groups every command shares are below (store, output, model, device, configuration,
budgets); a group of one family of commands lives with them (``cli/_llm_options.py``,
``cli/_plan.py``). ``tests/cli/test_flag_groups.py`` holds every command to it: a flag that two
commands take is declared in one place, with one help text, unless it means different things
there (that test lists those flags, and why).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import typer

from accelscope.cli._device import DEVICE_HELP, TF32_HELP, Tf32, parse_device, parse_tf32
from accelscope.cli._types import (
    Sizes,
    duration_option,
    fraction_option,
    parse_input,
    parse_sizes,
    positive_int,
)
from accelscope.spec import DeviceRef, Precision, TensorSpec, parse_options, parse_precision
from accelscope.store.sqlite import DEFAULT_STORE_PATH

__all__ = [
    "GROUP",
    "MODEL_HELP",
    "AccuracyFlags",
    "BatchFlags",
    "BatchSizesFlags",
    "CatalogFlags",
    "ConfirmFlags",
    "DeviceFlags",
    "FlagGroup",
    "InputFlags",
    "JsonFlags",
    "MarkdownFlags",
    "MeasureBudgetFlags",
    "ModelFlags",
    "OptionFlags",
    "OutputFlags",
    "QuietFlags",
    "RefreshProbesFlags",
    "ReportFlags",
    "ResumeFlags",
    "RunBudgetFlags",
    "RunTimeoutFlags",
    "RuntimeFlags",
    "SamplingBudgetFlags",
    "SeedFlags",
    "SlaFlags",
    "StoreFlags",
    "StoringFlags",
    "Tf32Flags",
    "flag",
    "stand_in",
    "with_flag_groups",
]

MODEL_HELP = "Zoo name, file.py:fn, module:fn, .onnx or .pt2."
"""The help of the ``MODEL`` argument of the commands that load a model."""

GROUP: Any = object()
"""The default a group parameter is declared with (``workload: WorkloadFlags = GROUP``), so it
can stand among the flags where its flags should be listed; the group replaces it."""


def flag(option: Any) -> Any:
    """A group field that is the flag ``option`` (a ``typer.Option``)."""
    return dataclasses.field(metadata={"option": option})


class FlagGroup:
    """Marks a frozen dataclass as a group of flags (each field made with :func:`flag`)."""

    is_flag_group: ClassVar[bool] = True


def _group_class(annotation: Any) -> type[Any] | None:
    if (
        isinstance(annotation, type)
        and issubclass(annotation, FlagGroup)
        and dataclasses.is_dataclass(annotation)
    ):
        return annotation
    return None


def stand_in(name: str) -> type[Any]:
    """A type named ``name`` for typer alone: the flag's value type lives in a package the
    CLI's start must not import (the llm package, the load package: numpy). Typer needs a name
    it can resolve and show (``<Lengths>``); the flag's parser makes the real value, importing
    its type when it runs, and the type checker sees the real type (``if TYPE_CHECKING``)."""
    return type(name, (), {"__module__": __name__, "__doc__": f"Stands in for {name}."})


_FIELD_TYPES: dict[type[Any], dict[str, Any]] = {}


def _field_types(group: type[Any]) -> dict[str, Any]:
    """The types of a group's fields (resolved once: many commands take the same group)."""
    if group not in _FIELD_TYPES:
        _FIELD_TYPES[group] = typing.get_type_hints(group)
    return _FIELD_TYPES[group]


def with_flag_groups(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with each parameter typed as a :class:`FlagGroup` spread into its flags for
    typer, and gathered back into the group when the command is called."""
    hints = typing.get_type_hints(command)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[Any], tuple[str, ...]]] = {}
    for parameter in inspect.signature(command).parameters.values():
        group = _group_class(hints.get(parameter.name))
        if group is None:
            parameters.append(parameter.replace(annotation=hints.get(parameter.name)))
            continue
        field_hints = _field_types(group)
        fields = dataclasses.fields(group)
        if parameter.default is not GROUP:
            raise TypeError(f"{command.__name__}: declare {parameter.name} = GROUP")
        groups[parameter.name] = (group, tuple(f.name for f in fields))
        for field in fields:
            if "option" not in field.metadata:
                raise TypeError(f"{group.__name__}.{field.name} is not declared with flag()")
            parameters.append(
                inspect.Parameter(
                    field.name,
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=field.metadata["option"],
                    annotation=field_hints[field.name],
                )
            )
    names = [p.name for p in parameters]
    if len(names) != len(set(names)):
        clash = sorted({n for n in names if names.count(n) > 1})
        raise TypeError(f"{command.__name__}: flags declared twice: {', '.join(clash)}")
    for name, (_, own) in groups.items():
        if name in names and name not in own:  # it would take that flag's value
            raise TypeError(f"{command.__name__}: group {name} is named like a flag")

    @functools.wraps(command)
    def spread(**values: Any) -> None:
        for name, (group, fields) in groups.items():
            values[name] = group(**{field: values.pop(field) for field in fields})
        command(**values)

    signature = inspect.Signature(parameters, return_annotation=None)
    spread.__signature__ = signature  # type: ignore[attr-defined]
    spread.flag_groups = {name: group for name, (group, _) in groups.items()}  # type: ignore[attr-defined]
    spread.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    return spread


# --------------------------------------------------------------------------------------------
# Where a run goes: the store (or none), the report, JSON on stdout, and how much is printed.


@dataclass(frozen=True)
class StoreFlags(FlagGroup):
    """The results store a command reads (or writes)."""

    store: Path | None = flag(
        typer.Option(None, "--store", help=f"Results store (default {DEFAULT_STORE_PATH}).")
    )

    @property
    def path(self) -> Path:
        """The store given, or the default one."""
        return self.store or DEFAULT_STORE_PATH


@dataclass(frozen=True)
class StoringFlags(StoreFlags):
    """The store a command's run is written to, or none (``--no-store``)."""

    no_store: bool = flag(typer.Option(False, "--no-store", help="Do not store the run."))

    @property
    def target(self) -> Path | None:
        """Where the run is stored: ``None`` with ``--no-store``."""
        return None if self.no_store else self.path


@dataclass(frozen=True)
class JsonFlags(FlagGroup):
    """``--json``: the result as JSON on stdout, and nothing else there."""

    as_json: bool = flag(typer.Option(False, "--json", help="Print machine-readable JSON only."))


@dataclass(frozen=True)
class ReportFlags(FlagGroup):
    """``--report``: where the HTML report is written."""

    report: Path | None = flag(typer.Option(None, "--report", help="HTML report path."))


@dataclass(frozen=True)
class OutputFlags(JsonFlags, ReportFlags, StoringFlags):
    """Where a run goes: the store (or none), the HTML report and JSON on stdout."""


@dataclass(frozen=True)
class QuietFlags(FlagGroup):
    """``--quiet``: the result alone, without progress lines or closing hints."""

    quiet: bool = flag(
        typer.Option(
            False, "--quiet", "-q", help="Print only the result: no progress lines or hints."
        )
    )


@dataclass(frozen=True)
class CatalogFlags(FlagGroup):
    """``--catalog``: your instance catalog, over the built-in one (``plan``, ``audit``)."""

    catalog: list[Path] | None = flag(
        typer.Option(None, "--catalog", help="Your catalog TOML (extends/overrides).")
    )

    @property
    def catalog_files(self) -> tuple[Path, ...]:
        return tuple(self.catalog or ())


@dataclass(frozen=True)
class MarkdownFlags(FlagGroup):
    """``--markdown``: the result also written as markdown (``compare``, ``gate``)."""

    markdown: Path | None = flag(
        typer.Option(
            None,
            "--markdown",
            help="Also write the result as markdown (a pull-request comment) here.",
        )
    )


# --------------------------------------------------------------------------------------------
# The model and where it runs.


@dataclass(frozen=True)
class InputFlags(FlagGroup):
    """The model's inputs and whether its files may run code."""

    inputs: list[TensorSpec] | None = flag(
        typer.Option(
            None,
            "--input",
            parser=parse_input,
            metavar="SPEC",
            help="Input spec NAME:SHAPE:DTYPE, N = batch (repeatable).",
        )
    )
    trust_model_code: bool | None = flag(
        typer.Option(
            None, "--trust-model-code", help="Allow unpickling model files (runs code in them)."
        )
    )

    @property
    def input_specs(self) -> tuple[TensorSpec, ...] | None:
        """The ``--input`` specs, or ``None``: the model's own."""
        return tuple(self.inputs) if self.inputs else None


@dataclass(frozen=True)
class ModelFlags(InputFlags):
    """The model's inputs, its weights and whether its files may run code."""

    weights: Path | None = flag(
        typer.Option(None, "--weights", help="State dict (.safetensors/.pt).")
    )


@dataclass(frozen=True)
class SeedFlags(FlagGroup):
    """``--seed``: the synthetic inputs (and ``load``'s schedule)."""

    seed: int | None = flag(
        typer.Option(
            None, "--seed", help="Seed of the synthetic inputs, and of load's query schedule (0)."
        )
    )


@dataclass(frozen=True)
class DeviceFlags(FlagGroup):
    """``--device``: where the model runs."""

    device: DeviceRef | None = flag(
        typer.Option(None, "--device", parser=parse_device, metavar="DEVICE", help=DEVICE_HELP)
    )

    def device_fields(self) -> dict[str, Any]:
        """The request's ``device`` and ``device_index``; none where ``--device`` is not given
        (the request's own default)."""
        if self.device is None:
            return {}
        return {"device": self.device.kind, "device_index": self.device.index}


@dataclass(frozen=True)
class Tf32Flags(FlagGroup):
    """``--tf32 on|off``: one TF32 setting for fp32 on CUDA."""

    tf32: Tf32 | None = flag(
        typer.Option(None, "--tf32", parser=parse_tf32, metavar="on|off", help=TF32_HELP)
    )

    @property
    def tf32_value(self) -> bool | None:
        """The setting, or ``None``: the request's default."""
        return self.tf32.values[0] if self.tf32 else None


@dataclass(frozen=True)
class RuntimeFlags(FlagGroup):
    """One configuration's runtime, precision and threads."""

    backend: str | None = flag(
        typer.Option(
            None, "--backend", help="Runtime: eager, compile, onnxruntime, openvino, ... (eager)."
        )
    )
    precision: Precision | None = flag(
        typer.Option(
            None, "--precision", parser=parse_precision, help="fp32, bf16, fp16, int8, ... (fp32)."
        )
    )
    threads: int | None = flag(
        typer.Option(
            None,
            "--threads",
            parser=positive_int("--threads"),
            help="Intra-op threads (default: all usable cores).",
        )
    )


@dataclass(frozen=True)
class OptionFlags(FlagGroup):
    """``--option key=value``: backend options."""

    options: list[str] | None = flag(
        typer.Option(None, "--option", help="Backend option key=value (repeatable).")
    )

    @property
    def option_pairs(self) -> tuple[tuple[str, str], ...] | None:
        """The options as ``(key, value)`` pairs, or ``None`` where none is given."""
        return parse_options(tuple(self.options)) if self.options else None


@dataclass(frozen=True)
class BatchSizesFlags(FlagGroup):
    """``--batch 1,8,32``: the batch sizes measured, each one its own configuration."""

    batch: Sizes | None = flag(
        typer.Option(
            None,
            "--batch",
            parser=parse_sizes,
            metavar="LIST",
            help="Batch sizes, e.g. 8 or 1,8,32.",
        )
    )

    @property
    def batch_sizes(self) -> tuple[int, ...] | None:
        """The sizes, or ``None``: the request's default."""
        return self.batch.values if self.batch else None


@dataclass(frozen=True)
class BatchFlags(FlagGroup):
    """``--batch 8``: the one batch size measured."""

    batch: int | None = flag(
        typer.Option(None, "--batch", parser=positive_int("--batch"), help="Batch size (8).")
    )


# --------------------------------------------------------------------------------------------
# Budgets, service levels and accuracy.


@dataclass(frozen=True)
class SamplingBudgetFlags(FlagGroup):
    """``--budget``: how long each measurement samples (``measure``, ``ceilings``, ``gate``)."""

    budget: float | None = flag(
        duration_option("--budget", "Time budget of each measurement, e.g. 10s or 3m.")
    )


@dataclass(frozen=True)
class MeasureBudgetFlags(FlagGroup):
    """``--measure-budget``: how long each configuration samples (``bench``, ``roofline``)."""

    measure_budget: float | None = flag(
        duration_option("--measure-budget", "Sampling time of each configuration, e.g. 10s.")
    )


@dataclass(frozen=True)
class RunBudgetFlags(FlagGroup):
    """``--budget``: the whole run of a search over configurations (``bench``, ``tune``)."""

    budget: float | None = flag(
        duration_option(
            "--budget", "Whole-run time budget: no configuration starts after it, e.g. 15m."
        )
    )


@dataclass(frozen=True)
class RunTimeoutFlags(FlagGroup):
    """``--timeout``: the wall-clock bound on each measured process (``bench``, ``doctor``)."""

    timeout: float | None = flag(
        duration_option(
            "--timeout", "Wall-clock bound on each measured run (a configuration, a script run)."
        )
    )


@dataclass(frozen=True)
class SlaFlags(FlagGroup):
    """``--sla-p99``: the p99 latency bound."""

    sla_p99: float | None = flag(duration_option("--sla-p99", "p99 latency SLA, e.g. 100ms."))


@dataclass(frozen=True)
class AccuracyFlags(FlagGroup):
    """Your labelled data and the accuracy drop allowed (``bench``, ``gate``)."""

    eval_data: Path | None = flag(
        typer.Option(None, "--eval-data", help="Your labelled eval data (.npz: inputs + labels).")
    )
    max_accuracy_drop: float | None = flag(
        fraction_option("--max-accuracy-drop", "Largest drop of the accuracy metric, e.g. 1%.")
    )


@dataclass(frozen=True)
class ConfirmFlags(FlagGroup):
    """``--confirm-rounds``: the alternated re-measures that confirm a search's best."""

    confirm_rounds: int | None = flag(
        typer.Option(
            None,
            "--confirm-rounds",
            help="Alternated re-measure rounds confirming the best configuration (0: none).",
        )
    )


@dataclass(frozen=True)
class ResumeFlags(FlagGroup):
    """``--resume``: continue the last unfinished run."""

    resume: bool = flag(
        typer.Option(False, "--resume", help="Continue the last unfinished run of this command.")
    )


@dataclass(frozen=True)
class RefreshProbesFlags(FlagGroup):
    """``--refresh-probes``: measure the precision probes again."""

    refresh_probes: bool = flag(
        typer.Option(
            False,
            "--refresh-probes",
            help="Measure the precision probes again (cached per machine).",
        )
    )
