"""PyTorch's flight recorder on a one-rank group: the dump's real format, and traintop's reader.

On the card the group is NCCL (the case the hang work needs: NCCL's collectives finish after
Python returns); without CUDA it is gloo, whose recorder writes the same format, so the path
runs in CI too.  The raw dump is kept in the output folder for the hang work's tests.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys

from gpucheck.context import HERE, Context
from gpucheck.results import Check, Result, failed, judged, run, skipped

FLIGHT_JOB = HERE / "workloads" / "flight_job.py"
ENTRY_KEYS = ("collective_seq_id", "profiling_name", "state", "process_group", "input_sizes")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _dump_facts(raw: dict) -> dict:
    entries = raw.get("entries") or []
    return {
        "version": raw.get("version"),
        "entries": len(entries),
        "entry_keys": sorted(entries[0]) if entries else [],
        "ops": sorted({e.get("profiling_name") for e in entries}),
        "states": sorted({e.get("state") for e in entries}),
        "pg_status": raw.get("pg_status"),
    }


def _judge_dump(summary: dict, raw: dict) -> Result:
    facts = _dump_facts(raw)
    reduces = [op for op in facts["ops"] if op and "all_reduce" in op]
    lacking = [k for k in ENTRY_KEYS if k not in facts["entry_keys"]]
    reason = (
        f"{summary['dump_api']} ({summary['backend']}, recorder on by "
        f"{summary['recorder_on_by']}): {facts['entries']} entries, ops {facts['ops']}, "
        f"states {facts['states']}" + (f"; lacks {lacking}" if lacking else "")
    )
    ok = facts["entries"] >= summary["all_reduces"] and bool(reduces) and not lacking
    return judged(ok, reason, **facts, saved_as="flight-recorder.json")


def _judge_reader(summary: dict) -> Result:
    """traintop's reader (in the job's process) must see the all-reduces the dump holds."""
    reader = summary["reader"]
    if reader["status"] == "not available in this tree":
        return skipped(f"not available in this tree ({reader['entry_point']} not found)")
    if reader["status"] != "ok":
        return failed(f"traintop's reader failed: {reader.get('error')}")
    entries = reader["entries"] or []
    seen = [e for e in entries if "all_reduce" in str(e.get("op", e.get("profiling_name")))]
    reason = f"traintop read {len(entries)} entries, {len(seen)} all-reduces"
    return judged(len(seen) >= summary["all_reduces"], reason, entries=entries[:8],
                  recorder_on_by=summary["recorder_on_by"])  # fmt: skip


def flight_checks(ctx: Context) -> list[Check]:
    """One run of the flight job under ``traintop run``; two answers (both failed if it fails)."""
    try:
        return _flight(ctx)
    except Exception as exc:  # a hung or broken job must not end the whole check
        reason = f"{type(exc).__name__}: {exc}"
        return [
            run("flight_recorder", DUMP_TITLE, failed, reason),
            run("flight_recorder_traintop", READER_TITLE, failed, reason),
        ]


def _flight(ctx: Context) -> list[Check]:
    """The job under ``traintop run``; its dump kept in the output folder, both answers."""
    backend = "gloo" if ctx.no_cuda else "nccl"
    out = ctx.work / "flight.json"
    argv = [
        sys.executable,
        str(FLIGHT_JOB),
        "--backend",
        backend,
        "--port",
        str(_free_port()),
        "--out",
        str(out),
    ]
    done = ctx.run(ctx.traintop("run", "--name", "check-flight", "--", *argv), timeout=180)
    if done.returncode != 0 or not out.exists():
        reason = f"flight job exited {done.returncode}: {(done.stdout + done.stderr)[-800:]}"
        return [
            run("flight_recorder", DUMP_TITLE, failed, reason),
            run("flight_recorder_traintop", READER_TITLE, failed, reason),
        ]
    summary = json.loads(out.read_text())
    dump = out.with_suffix(".dump.json")
    shutil.copyfile(dump, ctx.out / "flight-recorder.json")
    raw = json.loads(dump.read_text())
    return [
        run("flight_recorder", DUMP_TITLE, _judge_dump, summary, raw),
        run("flight_recorder_traintop", READER_TITLE, _judge_reader, summary),
    ]


DUMP_TITLE = "PyTorch flight recorder dump on a one-rank group (the format the hang work reads)"
READER_TITLE = "traintop's flight-recorder read (hang work, issue 25)"
