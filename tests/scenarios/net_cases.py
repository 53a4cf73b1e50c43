"""The multi-rank communication cases: zero-code `traintop run -- torchrun ...` DDP jobs.

Each case starts one gloo DDP job of 2 or 3 ranks with no traintop code in it, inside a network
namespace of its own whose loopback carries all of the job's traffic (ranks of one job in one
container), shaped by a token bucket or left fast; `traintop diagnose` runs in the monitor's
namespace, as a user on the box would, and must see the job's traffic through
``/proc/PID/net/dev``.  A shaped link must be named ``network``; the fast one must not.

``CASES`` is the table the scenario matrix runs; ``run_case`` runs one case once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tests.scenarios.harness import (
    DiagnoseRun,
    Workload,
    run_diagnose,
    running,
    scenario_env,
    start_workload,
    traintop_cmd,
    wait_for_segments,
)
from tests.scenarios.netns import loopback_host

WORKLOAD = Path(__file__).parent / "workloads" / "ddp_network.py"
PORT = 29600  # the namespace is private: no other job can hold it
WORKLOAD_SECONDS = 35.0


@dataclass(frozen=True)
class NetCase:
    """One job shape: ``wanted`` is the verdict it must get (``forbidden`` the one it must not),
    ``rate`` the tc rate on the namespace's loopback (None: unshaped), ``batch`` per rank."""

    name: str
    wanted: str
    ranks: int
    rate: str | None
    batch: int
    setup: str
    forbidden: str | None = None


CASES: dict[str, NetCase] = {
    case.name: case
    for case in (
        NetCase("network_2r_20mbit", "network", 2, "20mbit", 32,
                "2-rank gloo DDP (torchrun), 260 k params, netns loopback tbf 20 Mbit/s"),
        NetCase("network_2r_100mbit", "network", 2, "100mbit", 32,
                "2-rank gloo DDP (torchrun), 260 k params, netns loopback tbf 100 Mbit/s"),
        NetCase("network_3r_50mbit", "network", 3, "50mbit", 32,
                "3-rank gloo DDP (torchrun), 260 k params, netns loopback tbf 50 Mbit/s"),
        NetCase("ddp_fast_link", "compute", 2, None, 512,
                "2-rank gloo DDP (torchrun), batch 512, netns loopback unshaped",
                forbidden="network"),
    )
}  # fmt: skip


def torchrun_argv(case: NetCase) -> list[str]:
    """`traintop run -- python -m torch.distributed.run ... ddp_network.py`: zero code."""
    job = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={case.ranks}",
           "--master_addr=127.0.0.1", f"--master_port={PORT}", str(WORKLOAD),
           "--seconds", str(WORKLOAD_SECONDS), "--batch", str(case.batch)]  # fmt: skip
    return [*traintop_cmd(), "run", "--", *job]


def run_case(case: NetCase, ring_dir: Path, log_dir: Path) -> tuple[Workload, DiagnoseRun]:
    """Start the job in its namespace, wait for every rank's segment, diagnose from outside."""
    env = scenario_env(ring_dir, GLOO_SOCKET_IFNAME="lo")
    with loopback_host(case.rate) as host, running([]) as jobs:
        argv = [*host.exec_prefix(), *torchrun_argv(case)]
        jobs.append(start_workload(argv, env, log_dir / f"{case.name}.log"))
        wait_for_segments(ring_dir, case.ranks, jobs)
        return jobs[0], run_diagnose(scenario_env(ring_dir))
