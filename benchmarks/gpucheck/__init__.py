"""The parts of ``benchmarks/gpu_check.py``: one check of traintop's GPU paths on a real card.

Each module holds one family of checks (NVML fields, the training jobs, the surfaces users read,
the flight recorder) or what they share (the context, nvidia-smi, the comparison rules, the
report).  ``workloads/`` holds the scripts the check runs as processes (the training job, the
one-rank process group); they import nothing from here, and run from a folder of their own so
that no module of this package can shadow one of torch's imports.
"""
