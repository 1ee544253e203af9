"""A real local Ray cluster for tests and trials: ``ray start --head`` plus more node processes
on this machine, each advertising a node type (a custom resource with the value 1), all of it
stopped on exit.

Every node runs ``ray start --block`` in its own process group, so stopping (or killing) a node
is signalling its group: nothing else on the machine is touched (``ray stop`` would stop every
Ray process of the user). ::

    with LocalRayCluster(["node_type_a", "node_type_b"]) as cluster:
        bench(..., executor="ray", ray_address=cluster.address, node_types=("node_type_b",))
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accelscope.processes import free_port
from accelscope.testing._service import Service

__all__ = ["LocalRayCluster", "RayNode"]

_STOP_GRACE_S = 10.0
_OBJECT_STORE_BYTES = 100 * 1024 * 1024


@dataclass
class RayNode:
    """One node process of the cluster and the node type it advertises."""

    node_type: str
    process: subprocess.Popen[bytes]
    killed: bool = False

    @property
    def alive(self) -> bool:
        """True while its ``ray start --block`` process runs."""
        return self.process.poll() is None


class LocalRayCluster(Service):
    """Head node of ``node_types[0]``, one more node per further type; ``add_node`` adds more,
    ``kill_node`` kills one (SIGKILL to its process group), ``stop`` stops them all."""

    def __init__(self, node_types: Sequence[str], *, start_timeout_s: float = 120.0) -> None:
        if not node_types:
            raise ValueError("a cluster needs at least the head's node type")
        self.node_types = tuple(node_types)
        self.start_timeout_s = start_timeout_s
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[RayNode] = []
        self._temp = Path(tempfile.mkdtemp(prefix="asray-", dir="/tmp"))
        self._ray = str(Path(sys.executable).with_name("ray"))

    def _common(self, node_type: str) -> list[str]:
        return [
            "--block",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            f"--object-store-memory={_OBJECT_STORE_BYTES}",
            "--resources",
            json.dumps({node_type: 1}),
            "--disable-usage-stats",
        ]

    def _spawn(self, args: list[str], node_type: str) -> RayNode:
        log = (self._temp / f"node-{len(self.nodes)}.log").open("wb")
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        process = subprocess.Popen(
            [self._ray, "start", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        log.close()
        node = RayNode(node_type, process)
        self.nodes.append(node)
        return node

    def start(self) -> None:
        """Start the head and one node per further type; wait until all have joined."""
        self._spawn(
            [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--temp-dir={self._temp}",
                *self._common(self.node_types[0]),
            ],
            self.node_types[0],
        )
        for node_type in self.node_types[1:]:
            self._spawn([f"--address={self.address}", *self._common(node_type)], node_type)
        self.wait_for()

    def add_node(self, node_type: str) -> RayNode:
        """Start one more node of ``node_type`` and wait until it has joined."""
        node = self._spawn([f"--address={self.address}", *self._common(node_type)], node_type)
        self.wait_for()
        return node

    def wait_for(self) -> None:
        """Wait until the cluster has as many live nodes of each type as this object started
        and did not kill (a short-lived ``ray`` client in a child process, so this process
        never holds a Ray connection)."""
        expected: dict[str, int] = {}
        for node in self.nodes:
            if not node.killed:
                expected[node.node_type] = expected.get(node.node_type, 0) + 1
        script = (
            "import sys, time, ray\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False)\n"
            f"expected = {expected!r}\n"
            f"deadline = time.monotonic() + {self.start_timeout_s}\n"
            "def short():\n"
            "    live = [n['Resources'] for n in ray.nodes() if n['Alive']]\n"
            "    return any(sum(1 for r in live if r.get(t)) < c for t, c in expected.items())\n"
            "while short():\n"
            "    if time.monotonic() > deadline: sys.exit(3)\n"
            "    time.sleep(0.2)\n"
        )
        for _ in range(int(self.start_timeout_s)):
            if not all(n.alive or n.killed for n in self.nodes):
                raise RuntimeError(f"a Ray node exited while starting; logs in {self._temp}")
            done = subprocess.run(
                [sys.executable, "-c", script],
                capture_output=True,
                timeout=self.start_timeout_s + 30,
                check=False,
            )
            if done.returncode == 0:
                return
            time.sleep(1.0)  # the head's GCS may not be listening yet
        raise RuntimeError(f"the local Ray cluster did not start; logs in {self._temp}")

    def kill_node(self, node: RayNode) -> None:
        """SIGKILL the node's whole process group (raylet, its workers and their children)."""
        node.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop every node (SIGTERM to each group, SIGKILL after a grace) and remove the
        session directory."""
        for node in reversed(self.nodes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=10)
        shutil.rmtree(self._temp, ignore_errors=True)
