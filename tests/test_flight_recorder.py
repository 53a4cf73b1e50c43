"""PyTorch's flight recorder (traintop/flight_recorder.py): turned on for NCCL before the first
process group unless the user decided, read through whatever dump the installed torch offers,
parsed from the JSON of ``FlightRecorder::dump_json``.

The GPU check runs ``read_flight_recorder()`` on NCCL.  Here the parser reads three documents: one
torch 2.13 wrote on gloo (taken from a real run), one torch 2.11 wrote on NCCL on an H100 (the GPU
check's run), and one in the NCCL shape of torch 2.4 (version "2.4": ``nccl:`` names, a started
entry); the reader takes every recorder the installed torch has; and the real function runs on gloo,
whose process groups torch 2.13 records too, in the hung job of tests/test_hangs.py (its ranks'
stack replies carry the unfinished entries).
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


NCCL_H100_2_11 = {  # torch 2.11.0+cu130 on an H100, NCCL, one rank: _dump_nccl_trace_json
    "version": "2.10",
    "pg_config": {"0": {"desc": "default_pg", "name": "0", "ranks": "[0]"}},
    "entries": [
        {"collective_seq_id": 1, "input_dtypes": ["Float"], "input_sizes": [[1024]],
         "is_p2p": False, "op_id": 1, "output_dtypes": ["Float"], "output_sizes": [[1024]],
         "p2p_seq_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"],
         "profiling_name": "nccl:all_reduce", "record_id": 0, "retired": False,
         "state": "completed", "thread_id": "140338864320832", "thread_name": "python3",
         "time_created_ns": 1795745314622862490,
         "time_discovered_completed_ns": 1795745314623465703,
         "time_discovered_started_ns": 0, "timeout_ms": 600000},
    ],
}  # fmt: skip
# the same process's _dump_fr_trace_json: the recorder other backends use, empty on NCCL
OTHER_RECORDER_ON_NCCL = {"comm_lib_version": "", "nccl_comm_state": {}, "pg_config": {},
                          "pg_status": {}, "version": "2.10"}  # fmt: skip


def _torch_with(monkeypatch, **dumps: dict) -> None:
    """A stand-in ``torch`` in sys.modules whose c10d module has these JSON dumps."""
    from types import SimpleNamespace

    def dumper(document: dict):
        return lambda includeCollectives, onlyActive: json.dumps(document).encode()

    c10d = SimpleNamespace(**{name: dumper(doc) for name, doc in dumps.items()})
    monkeypatch.setitem(os.sys.modules, "torch", SimpleNamespace(_C=SimpleNamespace(
        _distributed_c10d=c10d)))  # fmt: skip


def test_every_recorder_is_read_nccl_s_and_the_other_backends(monkeypatch) -> None:
    """On a CUDA build both dumps exist and NCCL's entries are only in NCCL's (seen on an H100:
    reading the other one alone found nothing); a gloo group's are in the other."""
    _torch_with(monkeypatch, _dump_fr_trace_json=OTHER_RECORDER_ON_NCCL,
                _dump_nccl_trace_json=NCCL_H100_2_11)  # fmt: skip
    (entry,) = fr.read_flight_recorder(only_active=False)
    assert (entry.group, entry.seq, entry.op, entry.state) == (
        "0:default_pg", 1, "all_reduce", "completed")  # fmt: skip
    _torch_with(monkeypatch, _dump_fr_trace_json=GLOO_2_13, _dump_nccl_trace_json=NCCL_H100_2_11)
    assert [(e.group, e.seq) for e in fr.read_flight_recorder()] == [  # in the order issued
        ("0:default_pg", 1), ("0:default_pg", 2), ("0:default_pg", 1)]  # fmt: skip


def test_a_recorder_that_fails_to_dump_leaves_the_other_s_entries(monkeypatch) -> None:
    _torch_with(monkeypatch, _dump_fr_trace_json=GLOO_2_13, _dump_nccl_trace_json=NCCL_H100_2_11)
    c10d = os.sys.modules["torch"]._C._distributed_c10d

    def broken(includeCollectives, onlyActive):
        raise RuntimeError("no NCCL here")

    c10d._dump_nccl_trace_json = broken
    assert [e.seq for e in fr.read_flight_recorder()] == [1, 2]
    c10d._dump_fr_trace_json = broken
    with pytest.raises(RuntimeError):
        fr.read_flight_recorder()


def test_a_collective_two_dumps_return_is_kept_once(monkeypatch) -> None:
    _torch_with(monkeypatch, _dump_fr_trace_json=GLOO_2_13, _dump_nccl_trace_json=GLOO_2_13)
    assert [e.seq for e in fr.read_flight_recorder()] == [1, 2]
    _torch_with(monkeypatch)
    assert fr.read_flight_recorder() is None  # a torch without a recorder


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
