"""Protocol stress: a writer flat out against reader processes; exact accounting, zero tearing.

The negative control runs a reader with the wrong read order in the same harness and must catch
torn records, which proves the harness can see tearing at all.
"""

from __future__ import annotations

import multiprocessing as mp

import pytest

from tests import ring_helpers

SECONDS = 1.5


def _run(tmp_path, capacity: int, crc: bool, readers) -> tuple[int, list]:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    directory = str(tmp_path / "ring")
    writer = ctx.Process(target=ring_helpers.writer_proc,
                         args=(directory, capacity, SECONDS + 0.5, crc, queue))  # fmt: skip
    writer.start()
    path = queue.get(timeout=10)
    procs = [ctx.Process(target=r, args=(path, SECONDS, queue)) for r in readers]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in range(len(procs) + 1)]
    for p in [writer, *procs]:
        p.join(timeout=30)
    written = next(r for r in results if isinstance(r, int))
    return written, [r for r in results if not isinstance(r, int)]


@pytest.mark.parametrize(("capacity", "crc"), [(64, False), (4096, False), (64, True)])
def test_stress_no_torn_records_and_exact_accounting(tmp_path, capacity, crc):
    written, results = _run(tmp_path, capacity, crc, [ring_helpers.reader_proc] * 3)
    assert written > 10_000
    for returned, lost, rejected, torn, covered in results:
        assert torn == 0
        assert returned + lost + rejected == covered
        assert returned > 0


def test_negative_control_wrong_read_order_sees_torn_records(tmp_path):
    _, results = _run(tmp_path, 64, False, [ring_helpers.wrong_order_reader_proc])
    accepted, torn = results[0]
    assert accepted > 0
    assert torn > 0, "the harness must be able to detect tearing"
