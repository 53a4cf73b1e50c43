"""The parts of ``benchmarks/gpu_check.py``: one check of traintop's GPU paths on a real card.

Each module holds one family of checks (NVML fields, the training jobs, the surfaces users read,
the flight recorder) or what they share (the context, nvidia-smi, the comparison rules, the
report).  ``train_job.py`` and ``flight_job.py`` are not imported: they run as the workloads.
"""
