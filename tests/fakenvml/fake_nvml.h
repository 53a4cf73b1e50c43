/* Shared state of the fake libnvidia-ml.so.1 (see README.md).
 *
 * The fake keeps one table of devices.  Each device holds named numeric readings (keys below),
 * optional waves that make readings move over time, per-symbol injected errors, processes and
 * loss triggers.  Everything is guarded by one mutex: ctypes releases the GIL around CDLL calls,
 * so concurrent pollers really do run in parallel here, as they would against a real driver.
 */
#ifndef FAKE_NVML_H
#define FAKE_NVML_H

#include <limits.h>
#include <pthread.h>

#define FAKE_MAX_DEVICES 16
#define FAKE_MAX_ERRORS 32
#define FAKE_MAX_PROCS 16
#define FAKE_MAX_PROCUTIL 16
#define FAKE_NA LLONG_MIN /* a reading that answers NVML_ERROR_NOT_SUPPORTED */

enum fake_key {
    K_UTIL_GPU, K_UTIL_MEM, K_MEM_TOTAL, K_MEM_RESERVED, K_MEM_USED, K_TEMP,
    K_THR_SHUTDOWN, K_THR_SLOWDOWN, K_THR_MEM_MAX, K_THR_GPU_MAX, K_POWER, K_POWER_LIMIT,
    K_CLOCK_SM, K_CLOCK_MEM, K_CLOCK_MAX_SM, K_CLOCK_MAX_MEM, K_PSTATE, K_FAN, K_REASONS,
    K_REASONS_SUPPORTED, K_MIG, K_PCIE_TX_RATE, K_PCIE_RX_RATE,
    K_GPM_SM_ACTIVE, K_GPM_SM_OCCUPANCY, K_GPM_TENSOR, K_GPM_DRAM, K_COUNT
};

/* Which per-process utilization call a device answers (directive "SEL procutil_api"). */
enum fake_procutil_api { PROCUTIL_NONE, PROCUTIL_OLD, PROCUTIL_NEW };

struct fake_error {
    char symbol[64];
    int code;
};

struct fake_proc {
    unsigned int pid;
    unsigned long long used_bytes;
    char kind; /* 'C' compute or 'G' graphics */
};

/* One process's per-process utilization (directive "SEL procutil PID SM MEM"): the driver gives a
 * sample of it for every sample period (1/6 s of fake time). */
struct fake_procutil {
    unsigned int pid;
    unsigned int sm, mem;
};

struct fake_wave {
    double amplitude;
    double period_s;
};

struct fake_device {
    char name[96];
    char uuid[96];
    char bus_id[32];
    long long value[K_COUNT];
    struct fake_wave wave[K_COUNT];
    struct fake_error errors[FAKE_MAX_ERRORS];
    int n_errors;
    struct fake_proc procs[FAKE_MAX_PROCS];
    int n_procs;
    struct fake_procutil procutil[FAKE_MAX_PROCUTIL];
    int n_procutil;
    enum fake_procutil_api procutil_api;
    int lost;
    long long calls;
    long long lose_after_calls; /* 0 = never */
    double lose_after_s;        /* 0 = never */
};

struct fake_state {
    pthread_mutex_t lock;
    struct fake_device dev[FAKE_MAX_DEVICES];
    int count;
    int init_refcount;
    int scenario_loaded;
    char driver[80];
    int cuda_version;
    struct fake_error global_errors[FAKE_MAX_ERRORS];
    int n_global_errors;
    int frozen;
    double fixed_time_s;
    double start_s;
    int gpm_samples_live; /* GpmSampleAlloc minus GpmSampleFree since fakenvml_reset: leaks */
};

/* Internal to the library: only nvml* and fakenvml_* symbols are exported. */
#define FAKE_INTERNAL __attribute__((visibility("hidden")))

extern FAKE_INTERNAL struct fake_state fake;

/* State helpers (fake_state.c); callers hold fake.lock. */
FAKE_INTERNAL void fake_reset_locked(int count);
FAKE_INTERNAL double fake_now_locked(void);
FAKE_INTERNAL long long fake_value(const struct fake_device *d, enum fake_key k);
FAKE_INTERNAL long long fake_value_at(const struct fake_device *d, enum fake_key k, double t);
FAKE_INTERNAL int fake_error_for(const struct fake_error *errors, int n, const char *symbol);
FAKE_INTERNAL int fake_apply_line(char *line, char *err, int err_len);
FAKE_INTERNAL int fake_load_file(const char *path, char *err, int err_len);

#endif
