"""`traintop export FILE --csv DIR | --trace OUT.json`."""

from __future__ import annotations

import sys
from pathlib import Path

from traintop.store.export_csv import export_csv
from traintop.store.export_trace import export_trace
from traintop.store.reader import Recording
from traintop.store.schema import StoreError

EXIT_FAILED = 1
EXIT_USAGE = 2


def run_export(path: str, *, csv_dir: str | None, trace: str | None) -> int:
    if csv_dir is None and trace is None:
        print("traintop: error: export needs --csv DIR and/or --trace OUT.json", file=sys.stderr)
        return EXIT_USAGE
    try:
        with Recording(path) as rec:
            if csv_dir is not None:
                files = export_csv(rec, Path(csv_dir))
                print(f"wrote {len(files)} tables to {csv_dir}: "
                      + ", ".join(f.name for f in files))  # fmt: skip
            if trace is not None:
                count = export_trace(rec, Path(trace))
                print(f"wrote {count} trace events to {trace} (open in https://ui.perfetto.dev)")
    except StoreError as exc:
        print(f"traintop: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"traintop: {exc.filename or path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    return 0
