"""The live pipeline: sampling, the job collector, focus and the verdict runner, made once.

Every surface that watches the machine (the monitor, `record`, `diagnose`, `snapshot`, the
exporter) runs the same pipeline (:mod:`traintop.pipeline.live`) and reads what it delivers: a
snapshot and the verdict judged on it, both made on the sampler thread.  The room sits above
``diagnosis/`` (it owns the verdict runner) and below every surface.
"""
