/* A fake libnvidia-ml.so.1 at the C ABI: the real pynvml wrappers, error mapping and struct
 * marshalling run unchanged on top of it.  Only the symbols traintop needs, with the exact
 * versioned names nvidia-ml-py 13.615 looks up.  Struct layouts are copied from nvml.h.
 *
 * Build with -DFAKE_NVML_OLD_DRIVER to mimic a pre-R535 driver: the newer symbols
 * (TemperatureV, MemoryInfo_v2, *RunningProcesses_v3, *ClocksEventReasons, GPM,
 * ProcessesUtilizationInfo) are then absent.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_nvml.h"

typedef int nvmlReturn_t;
typedef struct fake_device *nvmlDevice_t;

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct { unsigned int version; int sensorType; int temperature; } nvmlTemperature_v1_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef union {
    double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal;
    long long sllVal; int siVal; unsigned short usVal;
} nvmlValue_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType, nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, INSUFFICIENT = 7,
       LOST = 15, VERSION_MISMATCH = 25, UNKNOWN = 999 };

/* Checks init, handle, loss triggers and injected errors; caller holds fake.lock. */
static int enter_locked(nvmlDevice_t d, const char *symbol) {
    if (!fake.init_refcount) return UNINIT;
    long idx = d - fake.dev;
    if (!d || idx < 0 || idx >= fake.count) return INVALID;
    d->calls++;
    if (d->lose_after_calls && d->calls > d->lose_after_calls) d->lost = 1;
    if (d->lose_after_s > 0.0 && fake_now_locked() >= d->lose_after_s) d->lost = 1;
    if (d->lost) return LOST;
    int code = fake_error_for(d->errors, d->n_errors, symbol);
    return code ? code : fake_error_for(fake.global_errors, fake.n_global_errors, symbol);
}

#define DEVICE_CALL(h)                               \
    pthread_mutex_lock(&fake.lock);                  \
    int rc_ = enter_locked((h), __func__);           \
    if (rc_) return (pthread_mutex_unlock(&fake.lock), rc_); \
    struct fake_device *d = (h);                     \
    (void)d
#define DONE(rc) return (pthread_mutex_unlock(&fake.lock), (rc))

static int read_key(struct fake_device *d, enum fake_key k, unsigned long long *out) {
    long long v = fake_value(d, k);
    if (v == FAKE_NA) return NOT_SUPPORTED;
    *out = (unsigned long long)v;
    return OK;
}

static int read_uint(struct fake_device *d, enum fake_key k, unsigned int *out) {
    unsigned long long v = 0;
    int rc = read_key(d, k, &v);
    if (rc == OK) *out = (unsigned int)v;
    return rc;
}

static int copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst || strlen(src) + 1 > len) return INSUFFICIENT;
    memcpy(dst, src, strlen(src) + 1);
    return OK;
}

/* ---- init / system ---- */

static nvmlReturn_t do_init(void) {
    pthread_mutex_lock(&fake.lock);
    if (!fake.scenario_loaded) {
        char err[512] = "";
        const char *path = getenv("FAKE_NVML_SCENARIO"), *t = getenv("FAKE_NVML_TIME");
        fake.scenario_loaded = 1;
        fake_reset_locked(1);
        if (path && *path && !fake_load_file(path, err, sizeof err)) {
            fprintf(stderr, "fake_nvml: %s\n", err);
            fake_reset_locked(0);
            fake.global_errors[0] = (struct fake_error){"nvmlInitWithFlags", UNKNOWN};
            fake.n_global_errors = 1;
        }
        if (t && *t) { fake.frozen = 1; fake.fixed_time_s = atof(t); }
    }
    int code = fake_error_for(fake.global_errors, fake.n_global_errors, "nvmlInitWithFlags");
    if (!code) fake.init_refcount++;
    DONE(code);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return do_init(); }
nvmlReturn_t nvmlInit_v2(void) { return do_init(); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&fake.lock);
    int rc = fake.init_refcount > 0 ? OK : UNINIT;
    if (rc == OK) fake.init_refcount--;
    DONE(rc);
}

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case OK: return "Success";
    case UNINIT: return "Uninitialized";
    case INVALID: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case NOT_FOUND: return "Not Found";
    case INSUFFICIENT: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 13: return "Function Not Found";
    case LOST: return "GPU is lost";
    case 21: return "No data";
    case VERSION_MISMATCH: return "Argument version mismatch";
    case 26: return "Requested functionality has been deprecated";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t system_string(char *buf, unsigned int len, int nvml_version) {
    pthread_mutex_lock(&fake.lock);
    if (!fake.init_refcount) DONE(UNINIT);
    char text[96];
    snprintf(text, sizeof text, nvml_version ? "13.%s" : "%s", fake.driver);
    DONE(copy_str(buf, len, text));
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *b, unsigned int n) { return system_string(b, n, 0); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *b, unsigned int n) { return system_string(b, n, 1); }

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    pthread_mutex_lock(&fake.lock);
    if (!fake.init_refcount) DONE(UNINIT);
    *version = fake.cuda_version;
    DONE(OK);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    pthread_mutex_lock(&fake.lock);
    if (!fake.init_refcount) DONE(UNINIT);
    int code = fake_error_for(fake.global_errors, fake.n_global_errors, __func__);
    if (!code) *count = (unsigned int)fake.count;
    DONE(code);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *out) {
    pthread_mutex_lock(&fake.lock);
    if (!fake.init_refcount) DONE(UNINIT);
    if (index >= (unsigned int)fake.count) DONE(INVALID);
    int rc = enter_locked(&fake.dev[index], __func__);
    if (rc == OK) *out = &fake.dev[index];
    DONE(rc);
}

/* ---- static facts ---- */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *buf, unsigned int len) {
    DEVICE_CALL(h);
    DONE(copy_str(buf, len, d->name));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *buf, unsigned int len) {
    DEVICE_CALL(h);
    DONE(copy_str(buf, len, d->uuid));
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *index) {
    DEVICE_CALL(h);
    *index = (unsigned int)(d - fake.dev);
    DONE(OK);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci) {
    DEVICE_CALL(h);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", d->bus_id);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", d->bus_id + 4);
    sscanf(d->bus_id, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = 0x233010DE;
    DONE(OK);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t h, int type, unsigned int *mhz) {
    DEVICE_CALL(h);
    if (type == 0 || type == 1) DONE(read_uint(d, K_CLOCK_MAX_SM, mhz));
    DONE(type == 2 ? read_uint(d, K_CLOCK_MAX_MEM, mhz) : NOT_SUPPORTED);
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t h, int type, unsigned int *t) {
    DEVICE_CALL(h);
    static const enum fake_key keys[] = {K_THR_SHUTDOWN, K_THR_SLOWDOWN, K_THR_MEM_MAX,
                                         K_THR_GPU_MAX};
    DONE(type >= 0 && type <= 3 ? read_uint(d, keys[type], t) : NOT_SUPPORTED);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned int *mw) {
    DEVICE_CALL(h);
    DONE(read_uint(d, K_POWER_LIMIT, mw));
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned int *mw) {
    DEVICE_CALL(h);
    DONE(read_uint(d, K_POWER_LIMIT, mw));
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current, unsigned int *pending) {
    DEVICE_CALL(h);
    int rc = read_uint(d, K_MIG, current);
    if (rc == OK) *pending = *current;
    DONE(rc);
}

/* ---- per-tick readings ---- */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
    DEVICE_CALL(h);
    if (fake_value(d, K_MIG) == 1) DONE(NOT_SUPPORTED);
    int rc = read_uint(d, K_UTIL_GPU, &u->gpu);
    DONE(rc ? rc : read_uint(d, K_UTIL_MEM, &u->memory));
}

/* v1 "used" counts the reserved memory too; v2 reports it separately (as nvidia-smi does). */
static void memory_parts(struct fake_device *d, unsigned long long p[4]) {
    p[0] = (unsigned long long)fake_value(d, K_MEM_TOTAL);
    p[1] = (unsigned long long)fake_value(d, K_MEM_RESERVED);
    p[2] = (unsigned long long)fake_value(d, K_MEM_USED);
    p[3] = p[0] - p[1] - p[2];
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    DEVICE_CALL(h);
    unsigned long long p[4];
    memory_parts(d, p);
    *m = (nvmlMemory_t){.total = p[0], .free = p[3], .used = p[1] + p[2]};
    DONE(OK);
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    DEVICE_CALL(h);
    if (m->version != 0x02000028) DONE(VERSION_MISMATCH);
    unsigned long long p[4];
    memory_parts(d, p);
    m->total = p[0], m->reserved = p[1], m->used = p[2], m->free = p[3];
    DONE(OK);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t h, nvmlTemperature_v1_t *t) {
    DEVICE_CALL(h);
    if (t->version != 0x0100000C) DONE(VERSION_MISMATCH);
    if (t->sensorType != 0) DONE(INVALID);
    unsigned int v = 0;
    int rc = read_uint(d, K_TEMP, &v);
    t->temperature = (int)v;
    DONE(rc);
}
#endif

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned int *t) {
    DEVICE_CALL(h);
    DONE(sensor == 0 ? read_uint(d, K_TEMP, t) : INVALID);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *mw) {
    DEVICE_CALL(h);
    DONE(read_uint(d, K_POWER, mw));
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned int *mhz) {
    DEVICE_CALL(h);
    if (type == 0 || type == 1) DONE(read_uint(d, K_CLOCK_SM, mhz));
    DONE(type == 2 ? read_uint(d, K_CLOCK_MEM, mhz) : NOT_SUPPORTED);
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t h, int type, unsigned int *mhz) {
    DEVICE_CALL(h);
    DONE(type == 2 ? read_uint(d, K_CLOCK_MAX_MEM, mhz) : read_uint(d, K_CLOCK_MAX_SM, mhz));
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t h, unsigned int *pstate) {
    DEVICE_CALL(h);
    DONE(read_uint(d, K_PSTATE, pstate));
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t h, unsigned int *pct) {
    DEVICE_CALL(h);
    DONE(read_uint(d, K_FAN, pct));
}

static nvmlReturn_t reasons(nvmlDevice_t h, enum fake_key k, unsigned long long *m,
                            const char *symbol) {
    pthread_mutex_lock(&fake.lock);
    int rc = enter_locked(h, symbol);
    DONE(rc ? rc : read_key(h, k, m));
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *m) {
    return reasons(h, K_REASONS, m, __func__);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t h, unsigned long long *m) {
    return reasons(h, K_REASONS_SUPPORTED, m, __func__);
}
#endif

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *m) {
    return reasons(h, K_REASONS, m, __func__);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t h, unsigned long long *m) {
    return reasons(h, K_REASONS_SUPPORTED, m, __func__);
}

/* Cumulative PCIe byte counters (fields 197 TX / 198 RX) grow at the scripted rates.  32-bit, as
 * an H100 with driver 580 answers them (valueType UNSIGNED_INT): they wrap every 4 GiB. */
static void field_value(struct fake_device *d, nvmlFieldValue_t *f, double now) {
    char symbol[32];
    snprintf(symbol, sizeof symbol, "field%u", f->fieldId);
    int code = fake_error_for(d->errors, d->n_errors, symbol);
    enum fake_key k = f->fieldId == 197 ? K_PCIE_TX_RATE : K_PCIE_RX_RATE;
    f->timestamp = (long long)(now * 1e6);
    f->latencyUsec = 0;
    if (code || (f->fieldId != 197 && f->fieldId != 198) || d->value[k] == FAKE_NA) {
        f->nvmlReturn = code ? code : NOT_SUPPORTED;
        return;
    }
    f->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
    f->nvmlReturn = OK;
    f->value.ullVal = 0;
    f->value.uiVal = (unsigned int)(unsigned long long)((double)d->value[k] * now);
}

/* The slow call (a real driver measures a 20 ms window inside it): the scripted rate in KB/s,
 * counter 0 TX and 1 RX, as nvidia-smi -q prints it ("Tx Throughput : 3092 KB/s"). */
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t h, unsigned int counter, unsigned int *kbs) {
    DEVICE_CALL(h);
    if (counter > 1) DONE(INVALID);
    unsigned long long rate = 0;
    int rc = read_key(d, counter == 0 ? K_PCIE_TX_RATE : K_PCIE_RX_RATE, &rate);
    if (rc == OK) *kbs = (unsigned int)(rate / 1024);
    DONE(rc);
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int count, nvmlFieldValue_t *values) {
    DEVICE_CALL(h);
    double now = fake_now_locked();
    for (int i = 0; i < count; i++) field_value(d, &values[i], now);
    DONE(OK);
}

/* The two-call protocol: a too-small buffer answers INSUFFICIENT_SIZE with the needed count. */
static nvmlReturn_t processes(nvmlDevice_t h, unsigned int *count, nvmlProcessInfo_t *out,
                              char kind, const char *symbol) {
    pthread_mutex_lock(&fake.lock);
    int rc = enter_locked(h, symbol);
    if (rc) DONE(rc);
    unsigned int n = 0;
    for (int i = 0; i < h->n_procs; i++) n += h->procs[i].kind == kind;
    if (n > *count || (n && !out)) { *count = n; DONE(n ? INSUFFICIENT : OK); }
    *count = 0;
    for (int i = 0; i < h->n_procs; i++) {
        if (h->procs[i].kind != kind) continue;
        out[(*count)++] = (nvmlProcessInfo_t){h->procs[i].pid, h->procs[i].used_bytes,
                                              0xFFFFFFFFu, 0xFFFFFFFFu};
    }
    DONE(OK);
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n,
                                                     nvmlProcessInfo_t *p) {
    return processes(h, n, p, 'C', __func__);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned int *n,
                                                      nvmlProcessInfo_t *p) {
    return processes(h, n, p, 'G', __func__);
}
#endif

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n,
                                                     nvmlProcessInfo_t *p) {
    return processes(h, n, p, 'C', __func__);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t h, unsigned int *n,
                                                      nvmlProcessInfo_t *p) {
    return processes(h, n, p, 'G', __func__);
}

/* ---- the driver's utilization samples, per-process utilization (nvml.h layouts) ---- */

/* The driver samples every 1/6 s and keeps about 20 s; timestamps are CPU-clock microseconds. */
#define SAMPLE_HZ 6
#define SAMPLE_RING 120
#define SAMPLE_EPOCH_US 1700000000000000ULL

typedef struct {
    unsigned long long timeStamp;
    nvmlValue_t sampleValue;
} nvmlSample_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    unsigned long long timeStamp;
    unsigned int pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} nvmlProcessUtilizationInfo_v1_t;

typedef struct {
    unsigned int version;
    unsigned int processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    nvmlProcessUtilizationInfo_v1_t *procUtilArray;
} nvmlProcessesUtilizationInfo_v1_t;

static unsigned long long sample_us(long long k) {
    return SAMPLE_EPOCH_US + (unsigned long long)(k * 1000000LL / SAMPLE_HZ);
}

/* Index of the newest sample period that has ended by now. */
static long long newest_sample(void) { return (long long)floor(fake_now_locked() * SAMPLE_HZ); }

/* GPU_UTILIZATION_SAMPLES (type 1) only: the util.gpu reading (with its wave) at each sample's
 * time, those after lastSeen; NOT_FOUND when none is, NOT_SUPPORTED under MIG. */
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t h, int type, unsigned long long last_seen,
                                  int *value_type, unsigned int *count, nvmlSample_t *out) {
    DEVICE_CALL(h);
    if (type != 1 || fake_value(d, K_MIG) == 1 || d->value[K_UTIL_GPU] == FAKE_NA)
        DONE(NOT_SUPPORTED);
    long long last = newest_sample(), first = last - SAMPLE_RING + 1;
    first = first < 0 ? 0 : first;
    while (first <= last && sample_us(first) <= last_seen) first++;
    unsigned int n = first > last ? 0 : (unsigned int)(last - first + 1);
    if (!n) DONE(NOT_FOUND);
    *value_type = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
    if (!out) { *count = n; DONE(OK); }
    n = n < *count ? n : *count;
    for (unsigned int i = 0; i < n; i++) {
        long long k = last - n + 1 + i;
        out[i].timeStamp = sample_us(k);
        out[i].sampleValue.ullVal = 0;
        out[i].sampleValue.uiVal = (unsigned int)fake_value_at(d, K_UTIL_GPU, (double)k / SAMPLE_HZ);
    }
    *count = n;
    DONE(OK);
}

/* The samples of both per-process calls for the newest sample period, if it is newer than
 * lastSeen: the scripted procutil lines; with none, the first compute process does all the work
 * (the device's util.gpu and util.mem), so an unscripted scenario stays self-consistent.  Like the
 * driver, only processes with some utilization have a sample.  Returns how many there are. */
static unsigned int procutil_rows(struct fake_device *d, unsigned long long last_seen,
                                  struct fake_procutil *rows) {
    if (sample_us(newest_sample()) <= last_seen) return 0;
    if (d->n_procutil) {
        memcpy(rows, d->procutil, sizeof *rows * (size_t)d->n_procutil);
        return (unsigned int)d->n_procutil;
    }
    long long sm = fake_value(d, K_UTIL_GPU), mem = fake_value(d, K_UTIL_MEM);
    for (int i = 0; i < d->n_procs; i++) {
        if (d->procs[i].kind != 'C' || sm == FAKE_NA || (sm <= 0 && mem <= 0)) continue;
        rows[0] = (struct fake_procutil){d->procs[i].pid, (unsigned)sm,
                                         mem == FAKE_NA ? 0u : (unsigned)mem};
        return 1;
    }
    return 0;
}

/* Shared gate: which API the device answers, MIG (no per-process data), and the sizing step. */
static int procutil_gate(struct fake_device *d, enum fake_procutil_api api, unsigned int n,
                         unsigned int have, int filling) {
    if (d->procutil_api != api || fake_value(d, K_MIG) == 1) return NOT_SUPPORTED;
    if (!n) return NOT_FOUND;
    return !filling || have < n ? INSUFFICIENT : OK;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, nvmlProcessUtilizationSample_t *out,
                                             unsigned int *count, unsigned long long last_seen) {
    DEVICE_CALL(h);
    struct fake_procutil rows[FAKE_MAX_PROCUTIL];
    unsigned int n = procutil_rows(d, last_seen, rows);
    int rc = procutil_gate(d, PROCUTIL_OLD, n, *count, out != NULL);
    if (rc == INSUFFICIENT) *count = n;
    if (rc) DONE(rc);
    unsigned long long ts = sample_us(newest_sample());
    for (unsigned int i = 0; i < n; i++)
        out[i] = (nvmlProcessUtilizationSample_t){rows[i].pid, ts, rows[i].sm, rows[i].mem, 0, 0};
    *count = n;
    DONE(OK);
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t h,
                                                   nvmlProcessesUtilizationInfo_v1_t *info) {
    DEVICE_CALL(h);
    if (info->version != 0x01000018) DONE(VERSION_MISMATCH);
    struct fake_procutil rows[FAKE_MAX_PROCUTIL];
    unsigned int n = procutil_rows(d, info->lastSeenTimeStamp, rows);
    int rc = procutil_gate(d, PROCUTIL_NEW, n, info->processSamplesCount,
                           info->procUtilArray != NULL);
    if (rc == INSUFFICIENT) info->processSamplesCount = n;
    if (rc) DONE(rc);
    unsigned long long ts = sample_us(newest_sample());
    for (unsigned int i = 0; i < n; i++)
        info->procUtilArray[i] = (nvmlProcessUtilizationInfo_v1_t){
            ts, rows[i].pid, rows[i].sm, rows[i].mem, 0, 0, 0, 0};
    info->processSamplesCount = n;
    info->lastSeenTimeStamp = ts;
    DONE(OK);
}

/* ---- GPM (Hopper and newer): opaque samples, metrics between two of them ---- */

#define GPM_METRIC_MAX 477 /* NVML_GPM_METRIC_MAX of nvml.h 13.x (nvidia-ml-py 13.615) */
#define GPM_MAGIC 0x47504d53u

struct fake_gpm_sample {
    unsigned int magic;
    struct fake_device *device; /* NULL until nvmlGpmSampleGet filled it */
    double t;
};
typedef struct fake_gpm_sample *nvmlGpmSample_t;

typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { const char *shortName, *longName, *unit; } metricInfo;
} nvmlGpmMetric_t;

typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

static int gpm_supported(struct fake_device *d) {
    for (int k = K_GPM_SM_ACTIVE; k <= K_GPM_DRAM; k++)
        if (d->value[k] == FAKE_NA) return 0;
    return fake_value(d, K_MIG) != 1;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t h, nvmlGpmSupport_t *support) {
    DEVICE_CALL(h);
    if (support->version != 1) DONE(VERSION_MISMATCH);
    support->isSupportedDevice = (unsigned int)gpm_supported(d);
    DONE(OK);
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *out) {
    if (!out) return INVALID;
    struct fake_gpm_sample *s = calloc(1, sizeof *s);
    if (!s) return UNKNOWN;
    s->magic = GPM_MAGIC;
    pthread_mutex_lock(&fake.lock);
    fake.gpm_samples_live++;
    *out = s;
    DONE(OK);
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s) {
    if (!s || s->magic != GPM_MAGIC) return INVALID;
    s->magic = 0;
    free(s);
    pthread_mutex_lock(&fake.lock);
    fake.gpm_samples_live--;
    DONE(OK);
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t h, nvmlGpmSample_t s) {
    DEVICE_CALL(h);
    if (!s || s->magic != GPM_MAGIC) DONE(INVALID);
    if (!gpm_supported(d)) DONE(NOT_SUPPORTED);
    s->device = d;
    s->t = fake_now_locked();
    DONE(OK);
}

/* Each metric over the two samples: the scripted percent at the later sample's time. */
static void gpm_metric(struct fake_device *d, double t, nvmlGpmMetric_t *m) {
    static const struct { unsigned int id; enum fake_key key; const char *name; } table[] = {
        {2, K_GPM_SM_ACTIVE, "SM_UTIL"}, {3, K_GPM_SM_OCCUPANCY, "SM_OCCUPANCY"},
        {5, K_GPM_TENSOR, "ANY_TENSOR_UTIL"}, {10, K_GPM_DRAM, "DRAM_BW_UTIL"},
    };
    m->nvmlReturn = NOT_SUPPORTED;
    m->value = 0.0;
    for (unsigned int i = 0; i < sizeof table / sizeof *table; i++) {
        if (table[i].id != m->metricId) continue;
        m->nvmlReturn = OK;
        m->value = (double)fake_value_at(d, table[i].key, t);
        m->metricInfo.shortName = table[i].name;
        m->metricInfo.longName = table[i].name;
        m->metricInfo.unit = "%";
    }
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get) {
    if (!get) return INVALID;
    if (get->version != 1) return VERSION_MISMATCH;
    nvmlGpmSample_t a = get->sample1, b = get->sample2;
    if (!a || !b || a->magic != GPM_MAGIC || b->magic != GPM_MAGIC) return INVALID;
    if (!a->device || a->device != b->device || get->numMetrics > GPM_METRIC_MAX) return INVALID;
    DEVICE_CALL(a->device);
    for (unsigned int i = 0; i < get->numMetrics; i++) gpm_metric(d, b->t, &get->metrics[i]);
    DONE(OK);
}
#endif

/* What nvitop reads besides the monitor's fields (benchmarks/bench_monitor.py --gpu-box runs it
 * on this fake): a data-center card's constant answers.  The driver model is Windows-only. */
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t h, int *mode) {
    DEVICE_CALL(h);
    *mode = 0; /* NVML_COMPUTEMODE_DEFAULT */
    DONE(OK);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t h, int *enabled) {
    DEVICE_CALL(h);
    *enabled = 1;
    DONE(OK);
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t h, int *active) {
    DEVICE_CALL(h);
    *active = 0;
    DONE(OK);
}

nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t h, int *current, int *pending) {
    (void)current, (void)pending;
    DEVICE_CALL(h);
    DONE(NOT_SUPPORTED);
}

static nvmlReturn_t codec_util(nvmlDevice_t h, unsigned int *util, unsigned int *period_us,
                               const char *symbol) {
    pthread_mutex_lock(&fake.lock);
    int rc = enter_locked(h, symbol);
    if (!rc) *util = 0, *period_us = 167000;
    DONE(rc);
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t h, unsigned int *u, unsigned int *p) {
    return codec_util(h, u, p, __func__);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t h, unsigned int *u, unsigned int *p) {
    return codec_util(h, u, p, __func__);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int error_type, int counter_type,
                                         unsigned long long *count) {
    (void)error_type, (void)counter_type;
    DEVICE_CALL(h);
    *count = 0;
    DONE(OK);
}
