"""How ``store-llm-2026-11.sqlite`` was made: ``llm`` runs as the code of commit 26fb54c stored
them (the documents were plain dicts then), so the typed documents that replaced them are
tested against what users already have on disk (rerun only to remake it, at that commit).

Against the scripted fake server: one complete run (a rate trial, a concurrency trial and a
capacity search at an SLO, with an ``llm-capacity`` document) and one run of a single trial.
Run from the repository root: ``.venv/bin/python tests/data/make_llm_store.py``.
"""

from __future__ import annotations

from pathlib import Path

from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.llm.summary import Slo
from accelscope.llm.workload import Lengths, PrefixScenario, Workload
from accelscope.testing import fixed_environment
from accelscope.testing.fake_llm_server import FakeLLMServer

HERE = Path(__file__).resolve().parent
STORE = HERE / "store-llm-2026-11.sqlite"


def main() -> None:
    STORE.unlink(missing_ok=True)
    env = fixed_environment()
    workload = Workload(
        input_tokens=Lengths(16, 16),
        output_tokens=Lengths(8, 8),
        prefix=PrefixScenario(8, 0.5),
        seed=7,
    )
    with FakeLLMServer(ttft_s=0.02, itl_s=0.005) as server:
        llm(
            LlmRequestSettings(
                url=server.url,
                model=server.model,
                rates=(20.0,),
                concurrencies=(4,),
                requests=30,
                workload=workload,
                slo=Slo.parse("ttft=200ms,tpot=50ms", 90.0),
                capacity="concurrency",
                capacity_trials=2,
                model_config=None,
            ),
            store_path=STORE,
            environment=env,
            command_line="accelscope llm (fixture)",
        )
        llm(
            LlmRequestSettings(
                url=server.url,
                model=server.model,
                concurrencies=(2,),
                requests=12,
                workload=workload,
            ),
            store_path=STORE,
            environment=env,
            command_line="accelscope llm (fixture)",
        )


if __name__ == "__main__":
    main()
