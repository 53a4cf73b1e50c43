"""PyTorch's flight recorder (traintop/flight_recorder.py): turned on for NCCL before the first
process group unless the user decided, read through whatever dump the installed torch offers,
parsed from the JSON of ``FlightRecorder::dump_json``.

The GPU check runs ``read_flight_recorder()`` on NCCL.  Here the parser reads two documents: one
torch 2.13 wrote on gloo (taken from a real run) and one in the NCCL shape of torch 2.4 (version
"2.4": ``nccl:`` names, a started entry); and the real function runs on gloo, whose process
groups torch 2.13 records too, in the hung job of tests/test_hangs.py (its ranks' stack replies
carry the unfinished entries).
"""

from __future__ import annotations

import json
import os

import pytest

from traintop import flight_recorder as fr

GLOO_2_13 = {  # torch 2.13.0+cpu, gloo, rank 0 of 2, onlyActive=True, while rank 1 slept
    "entries": [
        {"collective_seq_id": 1, "input_dtypes": ["Float"], "input_sizes": [[4]],
         "is_p2p": False, "op_id": 1, "output_dtypes": ["Float"], "output_sizes": [[4]],
         "p2p_seq_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"],
         "profiling_name": "gloo:all_reduce", "record_id": 0, "retired": True,
         "state": "scheduled", "thread_id": "140622579678080", "thread_name": "python",
         "time_created_ns": 1795734625556887265, "time_discovered_completed_ns": 0,
         "time_discovered_started_ns": 0, "timeout_ms": 1800000},
        {"collective_seq_id": 2, "input_dtypes": ["Float"], "input_sizes": [[4]],
         "is_p2p": False, "op_id": 2, "output_dtypes": ["Float"], "output_sizes": [[4]],
         "p2p_seq_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"],
         "profiling_name": "gloo:all_reduce", "record_id": 1, "retired": False,
         "state": "scheduled", "thread_id": "140622579678080", "thread_name": "python",
         "time_created_ns": 1795734627556887265, "time_discovered_completed_ns": 0,
         "time_discovered_started_ns": 0, "timeout_ms": 1800000},
    ],
    "nccl_comm_state": {},
    "pg_config": {"0": {"desc": "default_pg", "name": "0", "ranks": "[0, 1]"}},
    "pg_status": {"0": {"last_completed_collective": "1", "last_enqueued_collective": "2",
                        "last_started_collective": "-1"}},
    "version": "2.10",
}  # fmt: skip
NCCL_2_4 = {
    "version": "2.4",
    "pg_config": {"1": {"name": "1", "desc": "undefined", "ranks": "[0, 1, 2, 3]"}},
    "entries": [
        {"record_id": 7, "pg_id": 1, "process_group": ["1", "undefined"],
         "collective_seq_id": 1042, "p2p_seq_id": 0, "op_id": 1042,
         "profiling_name": "nccl:reduce_scatter", "time_created_ns": 1700000000000000000,
         "input_sizes": [[8192, 1024]], "input_dtypes": ["BFloat16"],
         "output_sizes": [[2048, 1024]], "output_dtypes": ["BFloat16"], "state": "started",
         "time_discovered_started_ns": 1700000000000100000,
         "time_discovered_completed_ns": None, "retired": False, "timeout_ms": 600000},
        {"record_id": 8, "pg_id": 1, "process_group": ["1", "undefined"],
         "collective_seq_id": 1043, "profiling_name": "nccl:all_reduce",
         "state": "completed", "retired": True},  # a malformed one: no sizes, still read
        {"pg_id": 1},  # no sequence number: left out
    ],
}  # fmt: skip


def test_the_json_of_torch_2_13_on_gloo_parses() -> None:
    first, second = fr.parse(json.dumps(GLOO_2_13))
    assert (first.group, first.seq, first.op, first.sizes, first.dtypes) == (
        "0:default_pg", 1, "all_reduce", ((4,),), ("Float",))  # fmt: skip
    assert not first.unfinished and second.unfinished  # retired = the watchdog is done with it
    assert second.timeout_ms == 1_800_000 and second.created_ns == 1795734627556887265


def test_the_json_of_the_nccl_recorder_parses() -> None:
    started, completed = fr.parse(json.dumps(NCCL_2_4).encode())
    assert (started.group, started.seq, started.op, started.state) == (
        "1", 1042, "reduce_scatter", "started")  # fmt: skip
    assert started.sizes == ((8192, 1024),) and started.unfinished and not completed.unfinished
    assert fr.parse(json.dumps({"version": "2.4"})) == []  # no entries: the key is absent


@pytest.mark.parametrize(
    ("environ", "backend", "cuda", "turned_on"),
    [
        ({}, "nccl", False, True),
        ({}, "cpu:gloo,cuda:nccl", False, True),
        ({}, None, True, True),  # torch picks NCCL for CUDA
        ({}, None, False, False),
        ({}, "gloo", True, False),  # the ledger sees gloo's blocking calls whole
        ({"TORCH_FR_BUFFER_SIZE": "0"}, "nccl", True, False),  # the user decided
        ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "500"}, "nccl", True, False),
    ],
)
def test_the_recorder_is_turned_on_for_nccl_unless_the_user_decided(
    monkeypatch, environ, backend, cuda, turned_on
) -> None:
    for name in fr.ENV_SIZES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert fr.enable_before_init(backend, lambda: cuda) is turned_on
    assert (os.environ.get("TORCH_FR_BUFFER_SIZE") == "2000") is turned_on
    assert fr.enabled() is (turned_on or environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE") == "500")
