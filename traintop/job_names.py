"""Job names a person recognises in ``traintop jobs`` and the Training panel.

Half of all training scripts are called ``main.py`` or ``train.py``; a list of five "train" jobs
says nothing.  The folder a script lives in is what people call the project
(``word_language_model/main``), so a generic script name gets it in front.  A run name the
launcher was given (torchrun's ``--rdzv-id``) is the user's own word for the job and wins over
any script name; ``traintop run --name`` and ``attach(name=...)`` win over both.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

GENERIC_STEMS = frozenset({"main", "train", "run", "training", "trainer", "script", "app",
                           "__main__"})  # fmt: skip
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.I)


def script_name(path: str) -> str:
    """``train.py`` -> its stem; a generic stem gets its folder: ``word_language_model/main``."""
    script = Path(path)
    stem = script.stem
    if stem.lower() not in GENERIC_STEMS:
        return stem
    folder = script.resolve().parent.name if script.name else ""
    return f"{folder}/{stem}" if folder else stem


def launcher_run_name() -> str | None:
    """torchrun's run id when a person chose it: not its default ``none``, not a random uuid."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if run_id in ("", "none") or _UUID.fullmatch(run_id):
        return None
    return run_id
