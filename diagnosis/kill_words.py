"""The kernel's word on a process it killed, in the words every surface prints.

"killed by the OOM killer (cgroup memory limit 8.0 GiB reached: 7.9 GiB in use 1s before)",
"killed by the OOM killer (the host ran out of memory: 0.1 GiB of 64.0 GiB available 2s
before)", "killed (SIGKILL), not by the OOM killer" (collectors/oom_witness.py says which).
"""

from __future__ import annotations

from traintop.collectors.snapshot import Ending, Kill
from traintop.diagnosis.text import duration, size

OOM = "killed by the OOM killer"
SIGKILL = "killed (SIGKILL), not by the OOM killer"


def kill_text(kill: Kill) -> str:
    """The whole sentence: who killed it, which memory ran out, what was last seen of it."""
    if kill.by != "oom":
        return SIGKILL
    return f"{OOM} ({_why(kill)})" if _why(kill) else OOM


def _why(kill: Kill) -> str:
    seen = ""
    if kill.used_bytes is not None and kill.limit_bytes is not None and kill.before_s is not None:
        if kill.scope == "host":
            free = max(0, kill.limit_bytes - kill.used_bytes)
            total = size(kill.limit_bytes)
            seen = f": {size(free)} of {total} available {duration(kill.before_s)} before"
        else:
            seen = f": {size(kill.used_bytes)} in use {duration(kill.before_s)} before"
    if kill.scope == "cgroup":
        limit = f" {size(kill.limit_bytes)}" if kill.limit_bytes else ""
        return f"cgroup memory limit{limit} reached{seen}"
    if kill.scope == "host":
        return f"the host ran out of memory{seen}"
    return ""


def how_killed(ending: Ending) -> str | None:
    """A few words for the job's state line ("gone by the OOM killer"); None: not known."""
    kill = ending.kill
    if kill is None:
        return None
    if ending.kind == "raised":
        kind = ending.detail.split(":", 1)[0] if ending.detail else "an exception"
        return f"({kind}: its worker killed by the OOM killer)"
    return "by the OOM killer" if kill.by == "oom" else "by SIGKILL"


def said(ending: Ending) -> str | None:
    """The ending line's words where the kernel's word changes them; None: as before."""
    kill = ending.kill
    if kill is None:
        return None
    if ending.kind == "gone":
        return kill_text(kill)
    if ending.kind == "raised" and kill.by == "oom":
        head = f"raised {ending.detail}" if ending.detail else "raised"
        return f"{head}; its DataLoader worker {kill.pid} was {kill_text(kill)}"
    return None


def short(ending: Ending) -> str | None:
    """ "killed by the OOM killer", "killed (SIGKILL)": the short word for other ranks' ends."""
    kill = ending.kill
    if kill is None or ending.kind != "gone":
        return None
    return OOM if kill.by == "oom" else "killed (SIGKILL)"
