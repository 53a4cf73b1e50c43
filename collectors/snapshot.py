"""Immutable snapshots: the one contract between collectors, diagnosis and the UI.

Every field holds a raw number in base units named in the field (bytes, seconds, watts, MHz,
percent 0-100).  ``None`` means "unavailable" (not supported, first sample, lost device), never 0.
Formatting belongs to ``tui/``; these classes hold numbers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from traintop.collectors.memory_state import JobMemory, PressureSet


@dataclass(frozen=True, slots=True)
class CpuCore:
    """Utilization of one logical CPU over the last interval, split like htop does."""

    index: int
    busy_pct: float | None
    user_pct: float | None = None
    system_pct: float | None = None
    iowait_pct: float | None = None
    freq_mhz: float | None = None


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    """All cores plus the whole-machine aggregate and load average."""

    cores: tuple[CpuCore, ...]
    total: CpuCore
    load_avg: tuple[float, float, float] | None
    freq_mhz: float | None
    freq_max_mhz: float | None
    physical_cores: int | None


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """Host RAM and swap; ``swap_*_bytes_per_s`` reveal active swapping, not just swap use."""

    total_bytes: int
    used_bytes: int
    available_bytes: int
    cached_bytes: int | None
    swap_total_bytes: int
    swap_used_bytes: int
    swap_in_bytes_per_s: float | None = None
    swap_out_bytes_per_s: float | None = None
    # The kernel's count of OOM kills since boot (/proc/vmstat oom_kill), and the trend of
    # ``available_bytes`` over the last minute (least squares; negative: memory being used up)
    oom_kills: int | None = None
    available_trend_bytes_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class DiskSnapshot:
    """One block device's throughput over the last interval (iostat -x columns)."""

    name: str
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    read_iops: float | None
    write_iops: float | None
    busy_pct: float | None
    await_ms: float | None


@dataclass(frozen=True, slots=True)
class NicSnapshot:
    """One network interface over the last interval."""

    name: str
    is_up: bool
    speed_mbps: int | None
    rx_bytes_per_s: float | None
    tx_bytes_per_s: float | None
    rx_packets_per_s: float | None
    tx_packets_per_s: float | None
    errors_per_s: float | None
    drops_per_s: float | None
    link_util_pct: float | None
    # Interfaces of a job's own network namespace (traintop.collectors.job_nics): the job's name
    # (what the Network panel shows after "@"), the JobSnapshot.job_ids living there, the netns
    # inode.
    job: str | None = None
    job_ids: tuple[str, ...] = ()
    netns_inode: int | None = None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding memory on a GPU, as NVML reports it."""

    pid: int
    used_memory_bytes: int | None
    kind: str = "C"  # "C" compute, "G" graphics, as in nvidia-smi
    # The process's own share of the GPU over the last interval, from NVML's per-process
    # utilization (nvmlDeviceGetProcessesUtilizationInfo, else nvmlDeviceGetProcessUtilization):
    # SM ("a kernel of this process ran", nvitop's %SM) and frame-buffer bandwidth, 0-100.  None
    # where the driver gives none (unsupported, MIG, no sample, a garbage value).
    sm_util_pct: float | None = None
    mem_util_pct: float | None = None


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """One GPU.  Every metric is optional: NOT_SUPPORTED and friends become ``None``."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    lost: bool = False
    error: str | None = None
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    mem_total_bytes: int | None = None
    mem_used_bytes: int | None = None
    mem_reserved_bytes: int | None = None
    mem_free_bytes: int | None = None
    temp_c: float | None = None
    temp_slowdown_c: float | None = None
    temp_shutdown_c: float | None = None
    temp_max_operating_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    pstate: int | None = None
    fan_pct: float | None = None
    clocks_event_reasons: int | None = None
    clocks_event_reasons_supported: int | None = None
    pcie_rx_bytes_per_s: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    mig_mode: bool | None = None
    processes: tuple[GpuProcess, ...] = ()
    # The mean of the driver's utilization samples (nvmlDeviceGetSamples) since the previous
    # tick: "a kernel ran" over the whole interval, not only its last sample period.
    util_gpu_mean_pct: float | None = None
    # Hopper and newer, NVML GPM (the counters DCGM's profiling fields read), 0-100 over the last
    # interval; None where GPM is unsupported.  SM active: SMs with a warp resident
    # (DCGM_FI_PROF_SM_ACTIVE); occupancy: resident warps of the maximum; tensor: any tensor
    # pipe active (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE); DRAM: memory bandwidth used of the peak
    # (DCGM_FI_PROF_DRAM_ACTIVE).
    sm_active_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_active_pct: float | None = None
    dram_active_pct: float | None = None


@dataclass(frozen=True, slots=True)
class GpuStatus:
    """Whether NVML is usable at all; ``message`` says why not ("NVML library not found")."""

    available: bool
    message: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessSnapshot:
    """One process row; ``group_pid`` is the trainer a DataLoader worker belongs to."""

    pid: int
    ppid: int | None
    user: str | None
    name: str
    cmdline: str
    cpu_pct: float | None
    rss_bytes: int | None
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    gpu_mem_bytes: int | None = None
    num_threads: int | None = None
    group_pid: int | None = None
    # CPU demand (traintop.collectors.schedstat): 100 = one thread runnable but waiting for a CPU
    # all interval, as pidstat's %wait; threads_busy and main_thread_* only for the processes that
    # matter (trainers, GPU holders, the busiest), else None.
    state: str | None = None  # main thread's state letter: R, S, D, Z, T...
    cpu_wait_pct: float | None = None
    cpu_wait_s: float | None = None  # summed over its live threads since each started
    threads_busy: int | None = None  # runnable (on a CPU or queued) at least half the interval
    main_thread_cpu_pct: float | None = None
    main_thread_wait_pct: float | None = None
    # Its SM share of the GPUs it holds, summed (NVML per-process utilization, nvitop's %SM;
    # collectors/gpu_truth.py); None where it holds no GPU or the driver gives none.
    gpu_sm_pct: float | None = None
    # Its threads other than the main one that ran at least 5 % of the interval (where its
    # threads were read one by one: collectors/schedstat.py), busiest first
    thread_cpu: tuple[ThreadCpu, ...] = ()


@dataclass(frozen=True, slots=True)
class ThreadCpu:
    """One thread of a process over the last interval: on a CPU and waiting for one (100 = the
    whole interval), from its ``/proc/PID/task/TID/schedstat``."""

    tid: int
    cpu_pct: float
    wait_pct: float | None = None


@dataclass(frozen=True, slots=True)
class HostInfo:
    """Static-ish facts for the header."""

    hostname: str
    uptime_s: float
    logical_cpus: int


@dataclass(frozen=True, slots=True)
class CollectorError:
    """A collector that failed this tick; shown in the status line and retried next tick."""

    collector: str
    message: str


@dataclass(frozen=True, slots=True)
class PhaseShare:
    """Share of step time spent in one named phase over the recent window."""

    name: str
    share: float  # 0..1 of summed step time
    mean_s: float


@dataclass(frozen=True, slots=True)
class ProcState:
    """What the kernel says of a process (its main thread, or the thread named): read before a
    stalled rank or worker is asked for its stack.  ``state`` is /proc's letter (R running, S
    sleeping, D uninterruptible, T stopped, t traced, Z zombie, X dead); ``cpu_s`` its CPU
    time so far, so two readings tell a working process from a stuck one; ``wchan``, ``syscall``
    (its name) and ``file`` (the path of the fd that syscall is on) say where it waits."""

    state: str
    cpu_s: float | None = None
    cpu_pct: float | None = None  # over the last interval
    wchan: str | None = None
    syscall: str | None = None
    file: str | None = None
    # Of the last interval, the share it ran or waited on a run queue (schedstat): what it
    # wanted of a CPU, however crowded the box; at least half is working (h34a)
    runnable_pct: float | None = None


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """A DataLoader worker process of a job (a child of the trainer)."""

    pid: int
    cpu_pct: float | None
    rss_bytes: int | None
    read_bytes_per_s: float | None
    # Only while its rank waits for a batch past the stall limit: the kernel's view and, where
    # the worker registered the faulthandler signal, its Python stack.
    proc: ProcState | None = None
    stack: RankStack | None = None


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective a rank entered, from its ledger (traintop/ledger.py; docs/ring-format.md).

    ``group`` is the process group's name (``0:default_pg``), or ``backward`` for the wait at the
    end of backward on the gradient reductions DDP and FSDP issue from C++; ``seq`` its number in
    that group (the ranks of a group agree on it).  Ages are as of the snapshot."""

    group: str
    seq: int
    op: str
    shape: str  # "f32[1024,4]"; "" when the call carries no tensor
    group_size: int
    age_s: float  # since it was entered
    duration_s: float | None  # how long it took; None while the rank is still inside
    raised: bool = False  # it ended with an exception (a peer's crash, a timeout)
    timeout_s: float | None = None  # the group's timeout, when its backend tells
    site: str = ""  # "train.py:step:120": the file, function and line that called it

    @property
    def inside(self) -> bool:
        return self.duration_s is None


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a Python stack: where it is and its source line; no locals, ever."""

    file: str
    line: int
    function: str
    code: str = ""  # the source line, stripped ("" where the file could not be read)


@dataclass(frozen=True, slots=True)
class RankStack:
    """A rank's training-thread stack, asked for while it stalls (collectors/stacks.py)."""

    frames: tuple[Frame, ...]  # outermost first
    age_s: float  # since it was taken
    source: str  # "helper" (the rank's helper thread) or "signal" (faulthandler, from C)
    phase: str | None = None  # the probe's phase when it was taken
    # Collectives PyTorch's flight recorder holds unfinished (NCCL: the GPU still waits).
    pending: tuple[Collective, ...] = ()
    # The DataLoader's pin_memory thread, outermost first, when the rank has one: a rank that
    # waits for a batch may wait on it, not on a worker (h34a)
    pin_memory: tuple[Frame, ...] = ()


@dataclass(frozen=True, slots=True)
class StackSample:
    """Stacks taken at different moments that were the same: one line of a folded profile."""

    frames: tuple[Frame, ...]  # outermost first
    count: int


@dataclass(frozen=True, slots=True)
class PhaseSamples:
    """A few samples of one rank's stack during one phase, folded by frame
    (``JobCollector.sample_phase``): where a rank spends that phase's time."""

    phase: str | None  # None: whatever the rank was doing
    taken: int  # samples taken
    matched: int  # of them, taken while the rank was in ``phase``
    stacks: tuple[StackSample, ...]  # most frequent first
    age_s: float


@dataclass(frozen=True, slots=True)
class GpuStepProfile:
    """One step of a rank profiled on the GPU (torch.profiler, one step every so often), its
    wall time split as Holistic Trace Analysis splits a stream's idle time.  The shares are of
    the step's wall time and add up to 1: kernels (kernel, memcpy, memset) running, or the GPU
    idle because the next launch came late (host_wait: launch-bound), because the host waited on
    a sync (sync), in the short gap between back-to-back kernels (kernel_wait), or otherwise."""

    step: int
    age_s: float
    step_s: float  # the profiled step's wall time (profiling slows it a little)
    kernel_share: float
    host_wait_share: float
    sync_share: float
    kernel_wait_share: float
    other_share: float
    kernels: int  # kernel launches in the step
    median_kernel_us: float | None = None
    launch_us_p50: float | None = None  # the CPU time of one launch call, median
    pageable_copies: int = 0  # host-to-device copies from pageable memory (pinning would help)
    attention: str | None = None  # SDPA kernel run: "flash", "efficient", "cudnn", "math"
    every_s: float | None = None  # how often a step is profiled
    cost_share: float | None = None  # profiling's measured cost as a share of training time
    graph_launches: int = 0  # CUDA graph launches in the step (``kernels`` counts their kernels)


@dataclass(frozen=True, slots=True)
class SyncSite:
    """A line of the user's code where the host waited for the GPU (``.item()``, a blocking
    copy, ``torch.cuda.synchronize()``...), from the probe's sync hook."""

    file: str
    line: int
    function: str
    kind: str  # "item", "copy", "nonzero", "synchronize", "event", "stream", "other"
    per_step: float  # over the recent window
    total: int  # since the probe started
    code: str = ""  # the source line, stripped


@dataclass(frozen=True, slots=True)
class LoaderFacts:
    """One DataLoader as the job built it (torch's defaults where it did not say)."""

    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None  # None with no workers
    batch_size: int | None = None


@dataclass(frozen=True, slots=True)
class OptimizerFacts:
    """One optimizer: its class and the kernels it was asked for (None: torch's default)."""

    name: str
    fused: bool | None
    foreach: bool | None


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the job already does, as its probe saw it, so no remedy it follows is offered.
    ``None`` is "could not tell" and never "off"."""

    device: str | None = None  # "cuda" or "cpu": where the model's parameters are
    autocast: str | None = None  # "bf16", "fp16", "off" as seen inside forward
    compiled: bool | None = None  # torch.compile'd model, or dynamo frames captured
    cuda_graphs: bool | None = None
    optimizers: tuple[OptimizerFacts, ...] = ()
    loaders: tuple[LoaderFacts, ...] = ()
    has_conv: bool | None = None
    channels_last: bool | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    attention: str | None = None  # SDPA kernel in use ("flash", ...) or "manual" (no SDPA)
    pinned_copies: bool | None = None  # host-to-device copies come from pinned memory
    # The probe's sync hook was on (a CUDA job, not switched off): only then does an empty
    # ``JobSnapshot.sync_sites`` mean that no sync was seen.
    syncs_watched: bool | None = None
    threads: int | None = None  # torch's intra-op threads (torch.get_num_threads())
    # How workers share a batch's tensors (torch.multiprocessing.get_sharing_strategy()):
    # "file_descriptor" (torch's default on Linux: a round trip to the worker per tensor) or
    # "file_system" (by name in /dev/shm).
    sharing_strategy: str | None = None


@dataclass(frozen=True, slots=True)
class CpuLimit:
    """The CPUs a process may use by its cgroup (v1 or v2), not the host's count."""

    cpus: float  # what it may use: the least of its quota, its cpuset and the host
    quota_cpus: float | None  # cpu.max (v2) or cfs_quota_us / cfs_period_us (v1); None: no quota
    cpuset: tuple[int, ...] | None  # the effective cpuset; None: every CPU of the host
    throttled_share: float | None = None  # of the quota periods over the last interval
    throttled_s_per_s: float | None = None  # time throttled per second over it
    cgroup: str = ""  # the cgroup's path, as /proc/PID/cgroup names it


@dataclass(frozen=True, slots=True)
class Kill:
    """How the kernel ended a process that left no word (collectors/oom_witness.py): ``by``
    "oom" (the OOM killer) or "sigkill" (a SIGKILL the OOM killer did not send); for an OOM
    kill ``scope`` "cgroup" (its cgroup's limit was reached) or "host" (the host ran out), and
    the memory the monitor saw at its last reading, ``before_s`` before the end (``used_bytes``
    of ``limit_bytes``: the cgroup's limit, or the host's RAM); ``pid`` the process killed (the
    rank, or the DataLoader worker whose death made it raise); ``source`` what says so."""

    by: str
    scope: str = ""
    pid: int | None = None
    limit_bytes: int | None = None
    used_bytes: int | None = None
    before_s: float | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class Ending:
    """How a rank's run ended, as it happened.  ``kind``: "finished" (the script returned),
    "raised" (an exception left it: ``detail`` is its type and message, ``frame`` where it came
    from), "exited" (``sys.exit`` with a failing status: ``detail`` the call, ``frame`` its line),
    "signal" (stopped by one: ``detail`` is its name, SIGTERM, SIGINT...), "gone" (no word:
    killed, or died in native code).  ``at``: when it was written (wall clock, s), which tells
    the rank that went first from those that fell after it; None for a gone rank.  ``stack``:
    the frames it ended in (traintop's own left out), so a stop inside a library call still
    names the user's line that made it."""

    kind: str
    detail: str = ""
    frame: Frame | None = None
    exit_code: int | None = None
    at: float | None = None
    stack: tuple[Frame, ...] = ()  # outermost first, ``frame`` its innermost; () where unknown
    kill: Kill | None = None  # the kernel's word on a rank gone (or a worker killed): OOM or not

    @property
    def frames(self) -> tuple[Frame, ...]:
        """The stack it ended in, else its one frame: an ending read before stacks were kept
        (an older probe's ``.end``, an older recording) is known by that frame alone."""
        return self.stack or ((self.frame,) if self.frame is not None else ())


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """A training process attached through its ring buffer, summarised over a recent window.

    ``state`` is one of "starting" (its ring exists, no step has ended yet), "live", "stalled",
    "finished", "crashed" (it raised), "stopped" (by a signal), "gone" (without a word:
    SIGKILL, a native crash), "restarted" (``ending`` says how an ended run ended).
    ``gpu_busy_share`` is the card's own truth over the recent window, read from
    ``gpu_busy_source``: "profile" (a sampled step's kernel time), "process" (NVML's
    per-process SM utilization) or "device" (NVML's GPU utilization); ``gpu_queued_share`` is
    the CUDA-event span, time with work queued on the stream: an upper bound of busy, never
    shown as busy.
    """

    pid: int
    name: str
    rank: int
    local_rank: int
    world_size: int
    state: str
    steps_total: int
    steps_per_s: float | None
    samples_per_s: float | None
    step_time_p50_s: float | None
    step_time_p95_s: float | None
    data_wait_share: float | None
    data_wait_p50_s: float | None
    data_wait_p95_s: float | None
    batches_per_s: float | None
    gpu_busy_share: float | None
    phases: tuple[PhaseShare, ...] = ()
    workers: tuple[WorkerSnapshot, ...] = ()
    lost_records: int = 0
    last_step_age_s: float | None = None
    recent_step_times_s: tuple[float, ...] = ()
    cuda_mem_allocated_bytes: int | None = None
    cuda_mem_reserved_bytes: int | None = None
    live_phase: str | None = None  # the phase the trainer is in right now (from the live word)
    live_phase_s: float | None = None  # how long it has been in it
    # Ranks of one job share this key (traintop.collectors.job_key.job_key); a lone process has its
    # own.
    job_id: str = ""
    started_at: float | None = None  # wall clock, seconds since the epoch, when the ring was made
    # An ended rank's end (wall clock): its writer's close, else when it was last seen alive
    # (collectors/jobs.py _Job._end); None while it runs.
    ended_at: float | None = None
    # The newest collective of each group in the rank's ledger (format 1.2), oldest first, read
    # once the rank stops stepping (from half its stall limit) and at its end, else empty; the
    # number of collectives it entered, None where the segment keeps no ledger (older writers).
    collectives: tuple[Collective, ...] = ()
    collectives_total: int | None = None
    stack: RankStack | None = None  # asked for only while the rank stalls
    phase_samples: PhaseSamples | None = None  # only when asked for (JobCollector.sample_phase)
    # No step for this long makes the job stalled, for this long hung (collectors/stall.py).
    stall_after_s: float | None = None
    hang_after_s: float | None = None
    # The same recent steps split by phase: one column per phase (``phases``' order), each as
    # long as ``recent_step_times_s``, so a long step's excess can be told by the phase it fell in.
    recent_phase_times_s: tuple[tuple[float, ...], ...] = ()
    # ---- the card's truth and what the job already does (collectors/gpu_truth.py, the probe's
    # facts side file) ----
    gpu_busy_source: str | None = None
    gpu_queued_share: float | None = None
    gpu_profile: GpuStepProfile | None = None
    sync_sites: tuple[SyncSite, ...] = ()  # most per step first
    facts: JobFacts | None = None
    cuda_alloc_retries: int | None = None  # the caching allocator's retries since start
    cuda_alloc_retries_steps: int | None = None  # ... counted when the job had made these steps
    cpu_limit: CpuLimit | None = None
    read_limit_bps: float | None = None  # the least read bandwidth its cgroups allow a device
    # Seconds the trainer took to take each worker's batch in (unpickling it, its tensors' shared
    # memory), over the window (collectors/handoff.py), and of them its thread's CPU; None: not
    # measured.
    handoff_s: float | None = None
    handoff_cpu_s: float | None = None
    # ---- the run's life ----
    first_step_s: float | None = None  # how long the first step took (the warm-up)
    ending: Ending | None = None  # how an ended run ended; None while it runs
    proc: ProcState | None = None  # the kernel's view of the rank, read while it stalls or starts
    # ---- what holds it back on the host (issue 43) ----
    memory: JobMemory | None = None  # its memory cgroup and, while a concern, its unique memory
    pressure: PressureSet | None = None  # its cgroup v2 group's own PSI (None: v1, or root)
    threads: tuple[PyThread, ...] = ()  # its Python threads, sampled while one is busy
    # Bytes its TCP connections hold unsent or unacknowledged this tick, read while it waits on
    # its peers (collectors/job_sockets.py): full while the link is the limit, empty while a
    # peer is late; None where not read
    send_queue_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class PyThread:
    """One Python thread of a rank, as its helper sampled it (traintop/thread_samples.py)
    while a thread other than the training thread was busy: its name, whether it is the
    training thread, its stack (outermost first) where it used the most CPU with that stack's
    count of the newest answer's samples, and in how many of the windows (of the answers of
    the last 30 s) it ran while the helper held the GIL and while it left it free: a thread
    that runs only while the GIL is free needs it."""

    tid: int
    name: str
    training: bool
    samples: int  # of the newest answer
    ran_held: int  # windows it ran in while the helper held the GIL
    ran_free: int  # ... while the helper left it free
    windows: int  # windows of each kind, over the answers kept
    frames: tuple[Frame, ...] = ()
    frames_count: int = 0
    daemon: bool = False
    age_s: float = 0.0


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """Everything sampled in one tick.  Built on the sampler thread, read by the UI."""

    timestamp: float  # wall clock, seconds since the epoch
    monotonic: float  # time.monotonic() at sampling
    interval_s: float
    host: HostInfo
    cpu: CpuSnapshot | None
    memory: MemorySnapshot | None
    disks: tuple[DiskSnapshot, ...]
    nics: tuple[NicSnapshot, ...]
    gpus: tuple[GpuSnapshot, ...]
    gpu_status: GpuStatus
    processes: tuple[ProcessSnapshot, ...]  # the rows kept (busiest, GPU holders, workers)
    jobs: tuple[JobSnapshot, ...] = ()
    errors: tuple[CollectorError, ...] = field(default=())
    # Processes on the machine at this tick, all of those scanned, not only the rows kept; None
    # where unknown (the scan failed, or a recording made before this field).
    process_total: int | None = None
    pressure: PressureSet | None = None  # the host's PSI (/proc/pressure); None: no PSI
