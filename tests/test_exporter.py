"""The exporter's output: dcgm-exporter's names, units and labels; per-rank job metrics; the
verdict; the per-sample cache that keeps parallel scrapes cheap; the listen address."""

from __future__ import annotations

import gzip
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from tests.isolation import no_gpu_env
from tests.snapshot_fixtures import EPOCH, MIB, ScriptedSource, ddp_job, machine, series, sweep_run
from traintop.diagnosis.api import BOTTLENECKS
from traintop.exporter.listen import DEFAULT_PORT, ListenAddress, parse_listen
from traintop.exporter.published import Latest
from traintop.exporter.run import ExporterConfig, Publisher, build_metrics_app
from traintop.pipeline.live import Pipeline

TRAINTOP = str(Path(sys.executable).with_name("traintop"))
FIXTURE = Path(__file__).parent / "exporter_fixtures" / "dcgm_fields.txt"
DCGM_UNITS = dict(
    line.split()[:2] for line in FIXTURE.read_text().splitlines() if line and line[0] != "#"
)
DCGM_NAMES = frozenset(DCGM_UNITS)
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname"}
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def parse_openmetrics(text: str, openmetrics: bool = True) -> dict[str, list]:
    """Every sample by its sample name (``x_total`` for counters), from either format."""
    parse = parse_om if openmetrics else parse_text
    samples: dict[str, list] = {}
    for family in parse(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def _published(snapshots, keep_ended_s: float = 900.0) -> Latest:
    """What the exporter's pipeline would have published after ``snapshots``."""
    latest = Latest()
    Pipeline(ScriptedSource(snapshots)).start(Publisher(latest, keep_ended_s))
    return latest


def _scrape(latest: Latest, accept: str = OPENMETRICS, host_metrics: bool = False) -> dict:
    app = build_metrics_app(
        ExporterConfig(ListenAddress("127.0.0.1", 0), host_metrics=host_metrics), latest
    )
    _, headers, body = app.metrics(accept, "")
    assert dict(headers)["Content-Type"].startswith(
        accept.split(";")[0] if accept else "text/plain"
    )
    return parse_openmetrics(body.decode(), openmetrics=bool(accept))


def test_gpu_metrics_use_dcgm_exporter_names_units_and_labels():
    samples = _scrape(_published([machine(gpus=8)]))
    dcgm = {name for name in samples if name.startswith("DCGM_")}
    assert dcgm == DCGM_NAMES  # every name we rely on, and only dcgm-exporter's
    used = samples["DCGM_FI_DEV_FB_USED"][0]
    assert set(used.labels) == DCGM_LABELS
    assert used.labels["device"] == "nvidia0" and used.labels["hostname"] == "gpu-node-07"
    assert used.labels["pci_bus_id"] == "00000000:18:00.0"
    assert used.value == 71_340  # MiB, as DCGM_FI_DEV_FB_USED
    assert DCGM_UNITS["DCGM_FI_DEV_FB_USED"] == "MiB"


def test_units_follow_dcgm():
    snap = machine(gpus=8)
    samples = _scrape(_published([snap]))
    by_gpu = {s.labels["gpu"]: s.value for s in samples["DCGM_FI_DEV_PCIE_RX_THROUGHPUT"]}
    assert by_gpu["3"] == pytest.approx(snap.gpus[3].pcie_rx_bytes_per_s / 1024)  # KB/s
    reasons = {s.labels["gpu"]: s.value for s in samples["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]}
    assert reasons["2"] == 0x28 and reasons["5"] == 0x4 and reasons["0"] == 0
    power = {s.labels["gpu"]: s.value for s in samples["DCGM_FI_DEV_POWER_USAGE"]}
    assert power["5"] == 700.0


def test_gpm_fields_are_dcgm_ratios_and_absent_where_unsupported():
    snap = machine(gpus=3)
    ampere = replace(snap.gpus[1], sm_active_pct=None, sm_occupancy_pct=None,
                     tensor_active_pct=None, dram_active_pct=None)  # fmt: skip
    snap = replace(snap, gpus=(snap.gpus[0], ampere, snap.gpus[2]))
    samples = _scrape(_published([snap]))
    for name, field in (
        ("DCGM_FI_PROF_SM_ACTIVE", "sm_active_pct"),
        ("DCGM_FI_PROF_SM_OCCUPANCY", "sm_occupancy_pct"),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor_active_pct"),
        ("DCGM_FI_PROF_DRAM_ACTIVE", "dram_active_pct"),
    ):
        got = {s.labels["gpu"]: s.value for s in samples[name]}
        assert DCGM_UNITS[name] == "ratio"
        assert got == pytest.approx({"0": getattr(snap.gpus[0], field) / 100,
                                     "2": getattr(snap.gpus[2], field) / 100})  # fmt: skip
        assert all(0 <= v <= 1 for v in got.values())


def test_job_busy_share_is_the_card_s_and_queued_share_apart():
    jobs = ddp_job(world=2)
    samples = _scrape(_published([machine(jobs=jobs)]))
    busy = {s.labels["rank"]: s.value for s in samples["traintop_job_gpu_busy_share"]}
    queued = {s.labels["rank"]: s.value for s in samples["traintop_job_gpu_queued_share"]}
    assert busy == pytest.approx({"0": jobs[0].gpu_busy_share, "1": jobs[1].gpu_busy_share})
    assert queued == pytest.approx({"0": jobs[0].gpu_queued_share, "1": jobs[1].gpu_queued_share})
    assert all(queued[r] > busy[r] for r in busy)


def test_unsupported_readings_and_lost_gpus_are_left_out_not_zero():
    snap = machine(gpus=3, lost=[1])
    snap = replace(snap, gpus=(replace(snap.gpus[0], temp_c=None), *snap.gpus[1:]))
    samples = _scrape(_published([snap]))
    assert {s.labels["gpu"] for s in samples["DCGM_FI_DEV_GPU_TEMP"]} == {"2"}
    assert {s.labels["gpu"] for s in samples["DCGM_FI_DEV_GPU_UTIL"]} == {"0", "2"}
    lost = {s.labels["gpu"]: s.value for s in samples["traintop_gpu_lost"]}
    assert lost == {"0": 0.0, "1": 1.0, "2": 0.0}


def test_job_metrics_per_rank():
    samples = _scrape(_published([machine(jobs=ddp_job(world=4))]))
    rates = {s.labels["rank"]: s for s in samples["traintop_job_steps_per_second"]}
    assert set(rates) == {"0", "1", "2", "3"}
    assert rates["2"].labels["job"] == "run:tcp://10.0.0.7:29500/4"
    assert rates["2"].labels["job_name"] == "llama-7b"
    comm = {s.labels["rank"]: s.value for s in samples["traintop_job_communication_share"]}
    assert comm["2"] == pytest.approx(0.03) and comm["0"] == pytest.approx(0.22)
    quantiles = {
        (s.labels["rank"], s.labels["quantile"]) for s in samples["traintop_job_step_time_seconds"]
    }
    assert ("1", "0.95") in quantiles and ("1", "0.5") in quantiles
    phases = {s.labels["phase"] for s in samples["traintop_job_phase_seconds"]}
    assert phases == {"data", "forward", "backward", "allreduce", "optimizer"}
    live = [s for s in samples["traintop_job_state"] if s.value == 1]
    assert {s.labels["traintop_job_state"] for s in live} == {"live"} and len(live) == 4
    assert samples["traintop_job_steps_total"][0].value == 8_800
    assert samples["traintop_job_info"][0].labels["world_size"] == "4"


def test_communication_share_absent_when_no_phase_times_it():
    job = replace(ddp_job(world=1)[0], phases=())
    samples = _scrape(_published([machine(jobs=(job,))]))
    assert "traintop_job_communication_share" not in samples


def test_verdict_per_job_with_confidence():
    snaps = series(6, jobs=ddp_job(world=2))
    samples = _scrape(_published(snaps))
    (verdict,) = samples["traintop_bottleneck"]
    assert verdict.labels["job"] == "run:tcp://10.0.0.7:29500/2"
    assert verdict.labels["bottleneck"] != "unknown"
    assert verdict.labels["severity"] in ("ok", "info", "warning", "error")
    assert 0 < verdict.value <= 1


def test_bottleneck_help_lists_every_id_of_the_contract():
    """The label's values are the CLI's ids, ``straggler`` among them: queries and alerts are
    written against the list the scrape itself documents."""
    app = build_metrics_app(ExporterConfig(ListenAddress("127.0.0.1", 0)), _published(series(6)))
    _, _, body = app.metrics(OPENMETRICS, "")
    (help_line,) = [
        line for line in body.decode().splitlines() if "HELP traintop_bottleneck " in line
    ]
    assert all(name in help_line for name in BOTTLENECKS) and "straggler" in help_line


def test_one_verdict_per_live_job_on_the_host():
    jobs = (*ddp_job(world=2), sweep_run(3), sweep_run(4, state="finished", ended_s=5.0))
    samples = _scrape(_published(series(6, job_source=lambda tick: jobs)))
    verdicts = {s.labels["job"]: s.labels["job_name"] for s in samples["traintop_bottleneck"]}
    assert verdicts == {
        "run:tcp://10.0.0.7:29500/2": "llama-7b",
        "pid:gpu-node-07/6003/3": "sweep3",
    }


CRASHED = "run:tcp://10.0.0.9:29500/3"


def _with_ended(tick: int = 0, *, ended_s: float = 60.0):
    """A running 2-rank job beside a 3-rank one that crashed ``ended_s`` before this tick."""
    end = EPOCH + tick - ended_s
    crashed = tuple(
        replace(r, ended_at=end, last_step_age_s=ended_s + 30.0, steps_per_s=26.7)
        for r in ddp_job(world=3, tick=tick, name="old", state="crashed", job_id=CRASHED)
    )
    return machine(jobs=(*ddp_job(world=2, tick=tick), *crashed), tick=tick)


def _job_ids(samples: dict, name: str) -> set[str]:
    return {s.labels.get("job") for s in samples.get(name, ())}


def test_an_ended_rank_serves_its_state_and_end_but_no_current_figure():
    """Every rate, share, quantile and phase describes a running rank: a sum over them must
    not count a dead one.  The crashed ranks keep their state (alerts) and gain their end."""
    samples = _scrape(_published([_with_ended()]))
    live = {"run:tcp://10.0.0.7:29500/2"}
    for name in (
        "traintop_job_steps_per_second", "traintop_job_samples_per_second",
        "traintop_job_data_wait_share", "traintop_job_gpu_busy_share",
        "traintop_job_gpu_queued_share", "traintop_job_communication_share",
        "traintop_job_step_time_seconds", "traintop_job_phase_seconds",
        "traintop_job_last_step_age_seconds",
    ):  # fmt: skip
        assert _job_ids(samples, name) == live, name
    crashed = {
        s.labels["rank"]
        for s in samples["traintop_job_state"]
        if s.labels["job"] == CRASHED and s.labels["traintop_job_state"] == "crashed"
    }
    assert crashed == {"0", "1", "2"}
    ended = {s.labels["rank"]: s.value for s in samples["traintop_job_ended_timestamp_seconds"]}
    assert ended == {"0": EPOCH - 60.0, "1": EPOCH - 60.0, "2": EPOCH - 60.0}
    for name in (
        "traintop_job_steps_total",
        "traintop_job_info",
        "traintop_job_started_timestamp_seconds",
    ):
        assert _job_ids(samples, name) == live | {CRASHED}, name


def test_an_ended_ranks_series_go_after_the_grace_period_segment_or_not():
    """Kept past the removal of its segment (the collector forgets it, the grace holds), gone
    ``keep_ended`` after its end."""
    snaps = [_with_ended(0, ended_s=60.0), machine(jobs=ddp_job(world=2, tick=20), tick=20)]
    kept = _scrape(_published(snaps, keep_ended_s=90.0))
    assert CRASHED in _job_ids(kept, "traintop_job_ended_timestamp_seconds")
    assert CRASHED in _job_ids(kept, "traintop_job_state")
    snaps.append(machine(jobs=ddp_job(world=2, tick=31), tick=31))
    gone = _scrape(_published(snaps, keep_ended_s=90.0))
    assert all(CRASHED not in _job_ids(gone, name) for name in gone)
    assert _job_ids(gone, "traintop_job_steps_per_second") == {"run:tcp://10.0.0.7:29500/2"}


def test_a_rank_restarted_under_its_old_labels_is_one_series_the_running_one():
    """torchrun restarts a rank with the same rendezvous: its dead instance and the new one
    have the same label set, and a scrape must not hold two samples of one series."""
    dead = replace(ddp_job(world=2)[1], state="restarted", pid=999, ended_at=EPOCH - 5.0)
    samples = _scrape(_published([machine(jobs=(*ddp_job(world=2), dead))]))
    states = [s for s in samples["traintop_job_state"] if s.value == 1]
    assert sorted((s.labels["rank"], s.labels["traintop_job_state"]) for s in states) == [
        ("0", "live"),
        ("1", "live"),
    ]
    assert "traintop_job_ended_timestamp_seconds" not in samples


def test_an_ended_jobs_last_verdict_has_its_own_name_for_the_grace_period():
    jobs = (*ddp_job(world=2), sweep_run(4, state="finished", ended_s=5.0))
    snaps = series(6, job_source=lambda tick: jobs)
    samples = _scrape(_published(snaps))
    (final,) = samples["traintop_final_bottleneck"]
    # its final word (what it claims of its time: 0 for an explained "unknown")
    assert final.labels["job_name"] == "sweep4" and 0 <= final.value <= 1
    assert "sweep4" not in {s.labels["job_name"] for s in samples["traintop_bottleneck"]}
    later = machine(jobs=ddp_job(world=2, tick=60), tick=60)
    assert "traintop_final_bottleneck" not in _scrape(_published([*snaps, later], 30.0))


def test_host_verdict_without_jobs():
    samples = _scrape(_published(series(6)))
    (verdict,) = samples["traintop_bottleneck"]
    assert verdict.labels["job"] == "" and verdict.labels["bottleneck"] == "throttle_thermal"


def test_host_metrics_only_behind_the_flag():
    latest = _published([machine(gpus=1)])
    assert not any(n.startswith("traintop_host_") for n in _scrape(latest))
    samples = _scrape(latest, host_metrics=True)
    assert len(samples["traintop_host_cpu_busy_percent"]) == 32
    assert samples["traintop_host_network_receive_bytes_per_second"]


def test_plain_text_format_for_old_scrapers_keeps_the_names():
    samples = _scrape(_published([machine(gpus=2)]), accept="")
    assert {n for n in samples if n.startswith("DCGM_")} == DCGM_NAMES


def test_parallel_scrapes_of_one_sample_format_once():
    latest = Latest()
    source = ScriptedSource([machine(gpus=8, jobs=ddp_job(world=8))])
    Pipeline(source).start(Publisher(latest))
    app = build_metrics_app(ExporterConfig(ListenAddress("127.0.0.1", 0)), latest)
    bodies = {app.metrics(OPENMETRICS, "")[2] for _ in range(100)}
    assert len(bodies) == 1 and app.formatted == 1
    zipped = app.metrics(OPENMETRICS, "gzip")[2]
    assert gzip.decompress(zipped) == bodies.pop() and app.formatted == 2
    source.push(machine(gpus=8, tick=1))
    app.metrics(OPENMETRICS, "")
    assert app.formatted == 3  # a new sample is formatted again


def test_no_metrics_before_the_first_sample():
    assert _scrape(Latest()) == {}


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("127.0.0.1:19400", "127.0.0.1", 19400),
        (":9999", "", 9999),
        ("[::1]:19401", "::1", 19401),
        ("localhost", "localhost", DEFAULT_PORT),
        ("0.0.0.0:0", "0.0.0.0", 0),
    ],
)
def test_listen_addresses(text, host, port):
    assert parse_listen(text) == ListenAddress(host, port)


@pytest.mark.parametrize("text", ["host:http", "host:70000", "host:-1", "[::1]:"])
def test_bad_listen_addresses(text):
    with pytest.raises(ValueError, match="port must be"):
        parse_listen(text)


def test_default_port_collides_with_neither_dcgm_nor_node_exporter():
    assert DEFAULT_PORT not in (9100, 9400) and not 9100 <= DEFAULT_PORT <= 9999
    assert parse_listen("[::1]:19400").url() == "http://[::1]:19400"
    assert MIB == 1 << 20


def test_served_over_http_with_content_negotiation_then_stops_on_sigterm(tmp_path: Path):
    """The installed command: OpenMetrics to Prometheus, text to curl, gzip, 404, SIGTERM."""
    env = {**os.environ, **no_gpu_env(tmp_path)}
    proc = subprocess.Popen(
        [TRAINTOP, "exporter", "--listen", "127.0.0.1:0", "--interval", "1"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        url = re.search(r"serving (http://\S+/metrics), sampling every 1 s$", line).group(1)
        om = urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": OPENMETRICS}))
        assert om.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        assert om.read().decode().endswith("# EOF\n")
        plain = urllib.request.urlopen(url)
        assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        zipped = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        assert b"traintop_exporter_info" in gzip.decompress(urllib.request.urlopen(zipped).read())
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(url.removesuffix("metrics") + "nope")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
