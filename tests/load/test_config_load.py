"""The ``[load]`` section of the config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelscope.cli.config import load_load_config
from accelscope.errors import ConfigError

GOOD = """
[model]
ref = "resnet50"

[load]
scenario = "server"
sla_p99 = "100ms"
backend = "compile"
precision = "int8"
batch = 8
threads = 2
options = ["channels_last=true"]
rate = 40.5
batching = false
max_delay = "5ms"
min_duration = "10s"
min_queries = 1000
burstiness_cv = 1.5
report = "load.html"
"""


def test_load_section_flattens_to_flag_names(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    flat = load_load_config(path)
    assert flat["model"] == "resnet50"
    assert flat["options"] == ("channels_last=true",)
    assert flat["batch"] == 8 and flat["rate"] == 40.5 and flat["batching"] is False
    assert flat["report"] == Path("load.html")
    assert flat["sla_p99"] == "100ms" and flat["burstiness_cv"] == 1.5


@pytest.mark.parametrize(
    ("text", "mention"),
    [
        ("[load]\nwarp = 1\n", "load.warp"),
        ("[load]\nbatch = '8'\n", "load.batch"),
        ("[load]\nsearch = 1\n", "load.search"),
        ("[load]\noptions = [1]\n", "load.options"),
        ("[load\n", "not valid TOML"),
    ],
)
def test_bad_load_config(tmp_path: Path, text: str, mention: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=mention):
        load_load_config(path)
