"""Ring segment format v1.2: constants, struct layouts and the header writer.

Kept apart from the writer so the monitor side can share one definition of the layout
(docs/ring-format.md documents it for other implementers).  Stdlib only.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
import zlib

MAGIC = b"TTRING\x00\x01"
VERSION_MAJOR, VERSION_MINOR = 1, 2
HEADER_SIZE = 4096
RECORD_SIZE = 128
ENDIAN_TAG = 0x01020304
MAX_PHASES = 8
MIN_CAPACITY, MAX_CAPACITY = 16, 1 << 20
NO_DATA_PHASE = 0xFFFFFFFF
CLOCK_MONOTONIC_ID = 1

# Static header, offsets 0..143 (see docs/ring-format.md); crc32 at 252 over [0,252) + [256,1024).
HEADER = struct.Struct("<8sHHIIIQQIIQqQQIIqqiiiIII16s")
HEADER_CRC_OFFSET = 252
PHASES_OFFSET, PHASE_NAME_SIZE = 256, 32
IDENTITY_OFFSET = 104  # i32 rank, local_rank, world_size
N_PHASES_OFFSET = 116  # u32 n_phases, data_phase_index
# 1.2: the writer's parent pid (i64, 0: unknown, an older writer): the launcher whose workers
# the ranks are, so a reader tells a launcher's restart from another run, even after both died.
PARENT_PID_OFFSET = 144
RUN_ID_OFFSET, HOSTNAME_OFFSET, NAME_OFFSET, TEXT_SIZE = 512, 576, 640, 64
CRC_AREA_END = 1024

# Hot block: u64 words at 1024.., each only ever written with one aligned 8-byte store.
HEAD_WORD, HEARTBEAT_WORD, DROPPED_WORD, STATE_WORD, LIVE_WORD, LIVE_STEP_WORD = range(128, 134)
# Bumped after each rewrite of the identity fields (rank, local rank, world size, run id), or of
# the name and phases before the first record, so a reader that parsed the header parses it again.
HEADER_GEN_WORD = 134
# 1.2: how many collectives the ledger holds (below), and what a monitor needs to ask this
# process for its training thread's stack (traintop/stack_helper.py): the helper thread's native
# id (for a thread-directed signal), the training thread's ident (the thread a faulthandler dump
# names), the signal its faulthandler dumps on (0: none registered).
LEDGER_HEAD_WORD, HELPER_TID_WORD, TRAIN_THREAD_WORD, STACK_SIGNAL_WORD = range(135, 139)
# 1.2: the helper thread's last wake (CLOCK_MONOTONIC ns), every ALIVE_EVERY_S while the process
# lives: when a rank ended that no monitor watched end (a SIGKILL leaves nothing else).
ALIVE_WORD = 139
# The training thread's native id (its /proc/PID/task/TID), written by the stack helper: a
# monitor reads that thread's state before it asks for its stack (0: unknown, read the process).
TRAIN_TID_WORD = 140
ALIVE_EVERY_S = 2.0
# 1.2: how long the first step took (ns; 0: no step yet), stored once with the first record: the
# warm-up's cost, kept after the ring has wrapped past record 0 (traintop/ring.py).
FIRST_STEP_WORD = 141
# 1.2, later writers: the trainer's handoff of the batches workers made (traintop/handoff.py):
# nanoseconds its training thread spent unpickling them, how many, and of those nanoseconds the
# ones it ran on a CPU (its thread's clock; 0, 0, 0: not kept).
HANDOFF_NS_WORD, HANDOFF_COUNT_WORD, HANDOFF_CPU_WORD = 142, 143, 144
STATE_INIT, STATE_RUNNING, STATE_CLOSED = 0, 1, 2
# Live word: phase start in ns with its low 4 bits replaced by the phase index (16 ns resolution:
# no division or shift on the hot path, and index + time change in one store).
LIVE_PHASE_BITS = 0xF

# Record: seq, step, t_start_ns, phase_ns[8], samples, flags, gpu_lag, gpu_ns, mem_bytes,
# tokens, crc32, seq_end.
RECORD = struct.Struct("<QqQ8QIHHQQIIQ")
RECORD_CRC_OFFSET = 116

# Header flags.
FLAG_CRC = 1 << 0  # every record carries a crc32 (weakly ordered CPUs)
FLAG_TOTALS = 1 << 1  # the writer keeps running totals in the totals slots (format 1.1)
FLAG_LEDGER = 1 << 2  # the collective ledger and the helper words are kept (format 1.2)

# Totals (1.1): the sums of every record published so far, so a reader of a fast trainer needs
# its newest records only.  Written every TOTALS_EVERY-th record, before that record's head,
# into slot (seq // TOTALS_EVERY) % TOTALS_SLOTS: tag (= seq: the records [0, seq) summed),
# samples, batches (records with samples > 0), gpu_ns and gpu_steps (records with GPU_VALID),
# mem_seq and mem_bytes (the newest record with MEM_VALID; 0 = none), phase_ns[8], tag again.
TOTALS_OFFSET, TOTALS_SLOTS, TOTALS_EVERY = 2048, 4, 8
TOTALS = struct.Struct("<16Q")


def totals_offset(at: int) -> int:
    """Where the totals of the records [0, at) go (``at`` a multiple of TOTALS_EVERY)."""
    return TOTALS_OFFSET + (at // TOTALS_EVERY % TOTALS_SLOTS) * TOTALS.size


# Collective ledger (1.2): the newest LEDGER_ENTRIES collectives the probe timed, entry i in slot
# i % LEDGER_ENTRIES at LEDGER_OFFSET: tag (= i + 1), the group's sequence number, enter and exit
# ns (exit 0 while inside; its lowest bit set when the call raised), op, dtype, ndim (NO_TENSOR:
# the call carries none), flags (0), the call site's line, the first four dims (each clamped to
# u32), the group's size, its timeout in ms (0: unknown), its name, the call site ("train.py:
# step": the file's base name and the calling function), tag again.  The group's three fields
# are contiguous (LEDGER_GROUP: the writer packs them once per group).  An entry is written with
# one pack, then LEDGER_HEAD_WORD (the publication); the exit is one aligned 8-byte store.
LEDGER_OFFSET, LEDGER_ENTRIES = 2560, 12
LEDGER_ENTRY = struct.Struct("<QQQQBBBBI4III24s32sQ")
LEDGER_GROUP = struct.Struct("<II24s")  # size, timeout ms, name: bytes 56..88 of an entry
LEDGER_EXIT_FIELD = 24  # byte offset of the exit word in an entry
LEDGER_RAISED = 1  # the exit word's lowest bit: the call raised (a peer's crash, a timeout)
NO_TENSOR = 0xFF
GROUP_NAME_SIZE, SITE_SIZE = 24, 32
# Op codes (index; 0 unknown).  "backward" is the wait at the end of backward() for the
# gradient reductions DDP and FSDP issue from C++ (traintop/comm_hooks.py), its own group.
OPS = ("?", "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
       "reduce_scatter_tensor", "broadcast", "reduce", "all_to_all", "all_to_all_single",
       "gather", "scatter", "barrier", "all_gather_object", "broadcast_object_list",
       "backward")  # fmt: skip
BACKWARD_GROUP = "backward"
# Dtype codes (index; 0 unknown), the short names a monitor prints.
DTYPES = ("?", "f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "bool",
          "c64", "c128", "f8e4m3", "f8e5m2")  # fmt: skip
assert LEDGER_OFFSET + LEDGER_ENTRIES * LEDGER_ENTRY.size <= HEADER_SIZE


def ledger_offset(index: int) -> int:
    """Where ledger entry ``index`` (0-based) lives."""
    return LEDGER_OFFSET + (index % LEDGER_ENTRIES) * LEDGER_ENTRY.size


# Record flags.
FLAG_GPU_VALID = 1 << 0  # gpu_ns holds a measured GPU time (of step - gpu_lag)
FLAG_MEM_VALID = 1 << 1  # mem_bytes holds a reading of the header's mem_kind
FLAG_CLAMPED = 1 << 2  # some value was out of range and was clamped by the writer
FLAG_EVAL = 1 << 3  # evaluation step
FLAG_CKPT = 1 << 4  # checkpointing happened in this step

MEM_NONE, MEM_CUDA_ALLOCATED, MEM_CUDA_RESERVED, MEM_RSS = 0, 1, 2, 3

_X86 = {"x86_64", "amd64", "i386", "i686", "x86"}


def default_crc() -> bool:
    """Records need a crc where pure-Python stores are not ordered (everything but x86)."""
    return os.uname().machine.lower() not in _X86  # platform.machine(), without its import


def segment_size(capacity: int) -> int:
    return HEADER_SIZE + capacity * RECORD_SIZE


def header_crc(first_kib: bytes | bytearray | memoryview) -> int:
    """crc32 of the static header with its own crc field left out."""
    view = memoryview(first_kib)
    return zlib.crc32(view[CRC_AREA_END - 768 : CRC_AREA_END], zlib.crc32(view[:HEADER_CRC_OFFSET]))


def record_crc(record: bytes | bytearray | memoryview) -> int:
    """crc32 of one record with its crc field read as zero."""
    view = memoryview(record)
    crc = zlib.crc32(view[:RECORD_CRC_OFFSET])
    crc = zlib.crc32(b"\0\0\0\0", crc)
    return zlib.crc32(view[RECORD_CRC_OFFSET + 4 : RECORD_SIZE], crc)


def fixed_text(text: str, size: int) -> bytes:
    """UTF-8, cut on a character boundary so the NUL-padded field always decodes."""
    return text.encode()[: size - 1].decode(errors="ignore").encode()


def proc_start_ticks() -> int:
    """Field 22 of /proc/self/stat: with the pid it identifies this process across pid reuse."""
    try:
        with open("/proc/self/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def stat_ino(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return 0


def boot_id() -> bytes:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return bytes.fromhex(f.read().strip().replace("-", ""))[:16]
    except (OSError, ValueError):
        return b"\0" * 16


def header_fields(name, phases, rank, local_rank, world_size, capacity, mem_kind) -> dict:
    """Validated header values; a ValueError here disables monitoring, never training."""
    phases = tuple(str(p) for p in phases)
    if not 1 <= len(phases) <= MAX_PHASES:
        raise ValueError(f"need 1..{MAX_PHASES} phases, got {len(phases)}")
    if capacity < MIN_CAPACITY or capacity > MAX_CAPACITY or capacity & (capacity - 1):
        raise ValueError(f"capacity must be a power of two in [{MIN_CAPACITY}, {MAX_CAPACITY}]")
    if rank < 0 or local_rank < 0 or world_size < 1:
        raise ValueError("rank and local_rank must be >= 0 and world_size >= 1")
    data = phases.index("data") if "data" in phases else NO_DATA_PHASE
    return {"name": str(name), "phases": phases, "rank": int(rank), "local_rank": int(local_rank),
            "world_size": int(world_size), "capacity": int(capacity), "mem_kind": int(mem_kind),
            "data_phase_index": data}  # fmt: skip


def write_header(mm: mmap.mmap, h: dict) -> None:
    """Fill the header page; the magic is stored last so a reader never trusts a partial one."""
    page = bytearray(CRC_AREA_END)
    HEADER.pack_into(
        page, 0, MAGIC, VERSION_MAJOR, VERSION_MINOR, HEADER_SIZE, RECORD_SIZE, h["capacity"],
        HEADER_SIZE, segment_size(h["capacity"]), _flags(h["crc"]), ENDIAN_TAG,
        int.from_bytes(os.urandom(8), "little"), os.getpid(), proc_start_ticks(),
        stat_ino("/proc/self/ns/pid"), os.getuid(), CLOCK_MONOTONIC_ID, time.monotonic_ns(),
        time.time_ns(), h["rank"], h["local_rank"], h["world_size"], len(h["phases"]),
        h["data_phase_index"], h["mem_kind"], boot_id(),
    )  # fmt: skip
    struct.pack_into("<q", page, PARENT_PID_OFFSET, os.getppid())
    for i, phase in enumerate(h["phases"]):
        _put_text(page, PHASES_OFFSET + i * PHASE_NAME_SIZE, PHASE_NAME_SIZE, phase)
    _put_text(page, RUN_ID_OFFSET, TEXT_SIZE, h["run_id"])
    _put_text(page, HOSTNAME_OFFSET, TEXT_SIZE, os.uname().nodename)  # socket.gethostname()
    _put_text(page, NAME_OFFSET, TEXT_SIZE, h["name"])
    struct.pack_into("<I", page, HEADER_CRC_OFFSET, header_crc(page))
    mm[8:CRC_AREA_END] = page[8:]
    q = memoryview(mm).cast("Q")
    q[STATE_WORD] = STATE_RUNNING
    q.release()
    mm[0:8] = MAGIC


def _flags(crc: bool) -> int:
    """A crc writer keeps no totals (docs/ring-format.md); every 1.2 writer keeps the ledger."""
    return (FLAG_CRC if crc else FLAG_TOTALS) | FLAG_LEDGER


def rewrite_identity(mm: mmap.mmap, rank: int, local_rank: int, world_size: int,
                     run_id: str) -> None:  # fmt: skip
    """Replace the identity fields of a published header, crc included.

    Readers validate the crc, so one that copies the page mid-rewrite rejects it and reads again;
    the magic and everything else stay as they are.
    """
    if rank < 0 or local_rank < 0 or world_size < 1:
        raise ValueError("rank and local_rank must be >= 0 and world_size >= 1")
    page = bytearray(mm[:CRC_AREA_END])
    struct.pack_into("<iii", page, IDENTITY_OFFSET, rank, local_rank, world_size)
    page[RUN_ID_OFFSET : RUN_ID_OFFSET + TEXT_SIZE] = bytes(TEXT_SIZE)
    _put_text(page, RUN_ID_OFFSET, TEXT_SIZE, run_id)
    struct.pack_into("<I", page, HEADER_CRC_OFFSET, header_crc(page))
    mm[8:CRC_AREA_END] = page[8:]


def rewrite_layout(mm: mmap.mmap, name: str, phases: tuple[str, ...]) -> None:
    """Replace the job name and the phase names of a published header that holds no record
    yet (a segment made at start-up learns them from the script), crc included."""
    fields = header_fields(name, phases, 0, 0, 1, MIN_CAPACITY, MEM_NONE)
    page = bytearray(mm[:CRC_AREA_END])
    struct.pack_into("<II", page, N_PHASES_OFFSET, len(fields["phases"]),
                     fields["data_phase_index"])  # fmt: skip
    page[PHASES_OFFSET:RUN_ID_OFFSET] = bytes(RUN_ID_OFFSET - PHASES_OFFSET)
    for i, phase in enumerate(fields["phases"]):
        _put_text(page, PHASES_OFFSET + i * PHASE_NAME_SIZE, PHASE_NAME_SIZE, phase)
    page[NAME_OFFSET : NAME_OFFSET + TEXT_SIZE] = bytes(TEXT_SIZE)
    _put_text(page, NAME_OFFSET, TEXT_SIZE, fields["name"])
    struct.pack_into("<I", page, HEADER_CRC_OFFSET, header_crc(page))
    mm[8:CRC_AREA_END] = page[8:]


def _put_text(page: bytearray, offset: int, size: int, text: str) -> None:
    encoded = fixed_text(text, size)
    page[offset : offset + len(encoded)] = encoded
