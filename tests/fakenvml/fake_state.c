/* Device table, presets, scenario parsing and the fakenvml_* scripting entry points.
 *
 * Scenario files and in-process tests use the same line grammar (README.md), so a behaviour
 * scripted for a subprocess can be reproduced in-process with fakenvml_directive().
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fake_nvml.h"

#define MIB (1024LL * 1024LL)

struct fake_state fake = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *KEY_NAMES[K_COUNT] = {
    "util.gpu", "util.mem", "mem.total", "mem.reserved", "mem.used", "temp",
    "thr.shutdown", "thr.slowdown", "thr.mem_max", "thr.gpu_max", "power", "power.limit",
    "clock.sm", "clock.mem", "clock.max.sm", "clock.max.mem", "pstate", "fan", "reasons",
    "reasons.supported", "mig", "pcie.tx_rate", "pcie.rx_rate",
    "gpm.sm_active", "gpm.sm_occupancy", "gpm.tensor", "gpm.dram",
};

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double fake_now_locked(void) {
    return fake.frozen ? fake.fixed_time_s : monotonic_s() - fake.start_s;
}

long long fake_value_at(const struct fake_device *d, enum fake_key k, double t) {
    long long base = d->value[k];
    const struct fake_wave *w = &d->wave[k];
    if (base == FAKE_NA || w->period_s <= 0.0) return base;
    return base + llround(w->amplitude * sin(2.0 * M_PI * t / w->period_s));
}

long long fake_value(const struct fake_device *d, enum fake_key k) {
    return fake_value_at(d, k, fake_now_locked());
}

int fake_error_for(const struct fake_error *errors, int n, const char *symbol) {
    for (int i = 0; i < n; i++)
        if (strcmp(errors[i].symbol, symbol) == 0) return errors[i].code;
    return 0;
}

static void add_error(struct fake_error *errors, int *n, const char *symbol, int code) {
    for (int i = 0; i < *n; i++)
        if (strcmp(errors[i].symbol, symbol) == 0) { errors[i].code = code; return; }
    if (*n >= FAKE_MAX_ERRORS) return;
    snprintf(errors[*n].symbol, sizeof errors[*n].symbol, "%s", symbol);
    errors[(*n)++].code = code;
}

/* H100 80GB HBM3 SXM5 at idle, driver 590 (NVML.md section 7): GPM (Hopper) and the newer
 * per-process utilization call answer. */
static void preset_h100(struct fake_device *d) {
    long long v[K_COUNT] = {0, 0, 81559 * MIB, 479 * MIB, 0, 41, 92, 89, 95, 87, 69850, 700000,
                            345, 2619, 1980, 2619, 0, FAKE_NA, 0x1, 0x1FF, 0, 2000000, 1000000,
                            0, 0, 0, 0};
    memcpy(d->value, v, sizeof v);
    d->procutil_api = PROCUTIL_NEW;
    snprintf(d->name, sizeof d->name, "NVIDIA H100 80GB HBM3");
    add_error(d->errors, &d->n_errors, "nvmlDeviceGetApplicationsClock", 26);
}

/* A100-SXM4-80GB with MIG enabled: utilization answers NOT_SUPPORTED; no GPM (Ampere); the
 * older per-process call only (NOT_SUPPORTED while MIG is on). */
static void preset_a100(struct fake_device *d) {
    long long v[K_COUNT] = {0, 0, 81920 * MIB, 869 * MIB, 0, 27, 92, 89, 95, 85, 67000, 500000,
                            1275, 1593, 1410, 1593, 0, FAKE_NA, 0x0, 0x1FF, 1, 500000, 500000,
                            FAKE_NA, FAKE_NA, FAKE_NA, FAKE_NA};
    memcpy(d->value, v, sizeof v);
    d->procutil_api = PROCUTIL_OLD;
    snprintf(d->name, sizeof d->name, "NVIDIA A100-SXM4-80GB");
}

/* GeForce RTX 3090 idle in P8: SM clock really reads 0 MHz, memory max threshold is N/A; no GPM
 * (Ampere), the older per-process call only. */
static void preset_rtx3090(struct fake_device *d) {
    long long v[K_COUNT] = {0, 0, 24576 * MIB, 316 * MIB, 0, 35, 98, 95, FAKE_NA, 93, 27000,
                            200000, 0, 405, 2100, 9751, 8, 0, 0x1, 0x1FF, FAKE_NA, 10000, 10000,
                            FAKE_NA, FAKE_NA, FAKE_NA, FAKE_NA};
    memcpy(d->value, v, sizeof v);
    d->procutil_api = PROCUTIL_OLD;
    snprintf(d->name, sizeof d->name, "NVIDIA GeForce RTX 3090");
}

static void init_device(struct fake_device *d, int index) {
    memset(d, 0, sizeof *d);
    preset_h100(d);
    snprintf(d->uuid, sizeof d->uuid, "GPU-7f3a9c2e-5b1d-4e8f-a6c0-%012x", 0xd15ea5e0 + index);
    snprintf(d->bus_id, sizeof d->bus_id, "00000000:%02X:00.0", 0x18 + 0x10 * index);
}

void fake_reset_locked(int count) {
    memset(fake.dev, 0, sizeof fake.dev);
    fake.count = count < 0 ? 0 : (count > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : count);
    for (int i = 0; i < FAKE_MAX_DEVICES; i++) init_device(&fake.dev[i], i);
    snprintf(fake.driver, sizeof fake.driver, "590.48.01");
    fake.cuda_version = 13010;
    fake.n_global_errors = 0;
    fake.frozen = 0;
    fake.fixed_time_s = 0.0;
    fake.start_s = monotonic_s();
}

static int find_key(const char *name) {
    for (int k = 0; k < K_COUNT; k++)
        if (strcmp(KEY_NAMES[k], name) == 0) return k;
    return -1;
}

/* Parses "N", "N-M" or "*" into an inclusive device range. */
static int parse_selector(const char *s, int *lo, int *hi) {
    char *end;
    if (strcmp(s, "*") == 0) { *lo = 0; *hi = FAKE_MAX_DEVICES - 1; return 1; }
    *lo = (int)strtol(s, &end, 10);
    if (end == s) return 0;
    *hi = *lo;
    if (*end == '-') *hi = (int)strtol(end + 1, &end, 10);
    return *end == '\0' && *lo >= 0 && *hi < FAKE_MAX_DEVICES && *lo <= *hi;
}

static int parse_value(const char *s, long long *out) {
    char *end;
    if (strcasecmp(s, "na") == 0) { *out = FAKE_NA; return 1; }
    *out = strtoll(s, &end, 0);
    return end != s && *end == '\0';
}

static int apply_preset(struct fake_device *d, const char *name) {
    if (strcmp(name, "h100") == 0) preset_h100(d);
    else if (strcmp(name, "a100") == 0) preset_a100(d);
    else if (strcmp(name, "rtx3090") == 0) preset_rtx3090(d);
    else return 0;
    return 1;
}

static int parse_api(const char *s, enum fake_procutil_api *out) {
    if (strcmp(s, "new") == 0) *out = PROCUTIL_NEW;
    else if (strcmp(s, "old") == 0) *out = PROCUTIL_OLD;
    else if (strcmp(s, "none") == 0) *out = PROCUTIL_NONE;
    else return 0;
    return 1;
}

/* "procutil PID SM MEM": replaces that pid's sample, or adds one.  Values are taken as given
 * (unsigned 32-bit), garbage included: a real driver has answered 2147483632 and 37100. */
static int set_procutil(struct fake_device *d, const char *pid, const char *sm, const char *mem,
                        char *err, int n) {
    struct fake_procutil p = {(unsigned)strtoul(pid, 0, 10), (unsigned)strtoul(sm, 0, 0),
                              (unsigned)strtoul(mem, 0, 0)};
    for (int i = 0; i < d->n_procutil; i++)
        if (d->procutil[i].pid == p.pid) { d->procutil[i] = p; return 1; }
    if (d->n_procutil >= FAKE_MAX_PROCUTIL) { snprintf(err, n, "too many procutil lines"); return 0; }
    d->procutil[d->n_procutil++] = p;
    return 1;
}

/* One directive on one device; returns 0 and fills err when the line is bad. */
static int apply_device(struct fake_device *d, char *verb, char *rest, char *err, int n) {
    char a[128] = "", b[128] = "", c[128] = "";
    int got = rest ? sscanf(rest, "%127s %127s %127s", a, b, c) : 0;
    long long v;
    if (strcmp(verb, "name") == 0 && rest) snprintf(d->name, sizeof d->name, "%s", rest);
    else if (strcmp(verb, "uuid") == 0 && got == 1) snprintf(d->uuid, sizeof d->uuid, "%s", a);
    else if (strcmp(verb, "busid") == 0 && got == 1) snprintf(d->bus_id, sizeof d->bus_id, "%s", a);
    else if (strcmp(verb, "preset") == 0 && got == 1 && apply_preset(d, a)) return 1;
    else if (strcmp(verb, "set") == 0 && got == 2 && find_key(a) >= 0 && parse_value(b, &v))
        d->value[find_key(a)] = v;
    else if (strcmp(verb, "wave") == 0 && got == 3 && find_key(a) >= 0)
        d->wave[find_key(a)] = (struct fake_wave){atof(b), atof(c)};
    else if (strcmp(verb, "error") == 0 && got == 2)
        add_error(d->errors, &d->n_errors, a, atoi(b));
    else if (strcmp(verb, "proc") == 0 && got >= 2 && d->n_procs < FAKE_MAX_PROCS)
        d->procs[d->n_procs++] = (struct fake_proc){(unsigned)atol(a), strtoull(b, 0, 0),
                                                    got == 3 ? c[0] : 'C'};
    else if (strcmp(verb, "noprocs") == 0) d->n_procs = 0;
    else if (strcmp(verb, "procutil") == 0 && got == 3) return set_procutil(d, a, b, c, err, n);
    else if (strcmp(verb, "noprocutil") == 0) d->n_procutil = 0;
    else if (strcmp(verb, "procutil_api") == 0 && got == 1 && parse_api(a, &d->procutil_api)) return 1;
    else if (strcmp(verb, "lost") == 0) d->lost = 1;
    else if (strcmp(verb, "lose_after_calls") == 0 && got == 1) d->lose_after_calls = atoll(a);
    else if (strcmp(verb, "lose_after_s") == 0 && got == 1) d->lose_after_s = atof(a);
    else { snprintf(err, n, "bad device directive '%s %s'", verb, rest ? rest : ""); return 0; }
    return 1;
}

static int apply_global(char *verb, char *rest, char *err, int n) {
    char a[128] = "", b[128] = "";
    int got = rest ? sscanf(rest, "%127s %127s", a, b) : 0;
    if (strcmp(verb, "devices") == 0 && got == 1) fake_reset_locked(atoi(a));
    else if (strcmp(verb, "count") == 0 && got == 1)
        fake.count = atoi(a) < 0 ? 0 : (atoi(a) > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : atoi(a));
    else if (strcmp(verb, "driver") == 0 && got == 1) snprintf(fake.driver, sizeof fake.driver, "%s", a);
    else if (strcmp(verb, "cuda") == 0 && got == 1) fake.cuda_version = atoi(a);
    else if (strcmp(verb, "freeze") == 0) { fake.fixed_time_s = fake_now_locked(); fake.frozen = 1; }
    else if (strcmp(verb, "time") == 0 && got == 1) { fake.frozen = 1; fake.fixed_time_s = atof(a); }
    else if (strcmp(verb, "error") == 0 && got == 2)
        add_error(fake.global_errors, &fake.n_global_errors, a, atoi(b));
    else { snprintf(err, n, "bad directive '%s %s'", verb, rest ? rest : ""); return 0; }
    return 1;
}

/* Applies one scenario line (comments and blank lines are fine); caller holds fake.lock. */
int fake_apply_line(char *line, char *err, int n) {
    char *hash = strchr(line, '#'), *save = NULL;
    if (hash) *hash = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    char *first = strtok_r(line, " \t", &save);
    if (!first) return 1;
    char *second = strtok_r(NULL, " \t", &save);
    char *rest = save && *save ? save : NULL;
    while (rest && (*rest == ' ' || *rest == '\t')) rest++;
    if (rest && *rest == '\0') rest = NULL;
    int lo, hi;
    if (!second || !parse_selector(first, &lo, &hi)) {
        char args[512];
        snprintf(args, sizeof args, "%s %s", second ? second : "", rest ? rest : "");
        return apply_global(first, second ? args : NULL, err, n);
    }
    for (int i = lo; i <= hi; i++) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", rest ? rest : "");
        if (!apply_device(&fake.dev[i], second, rest ? copy : NULL, err, n)) return 0;
    }
    return 1;
}

int fake_load_file(const char *path, char *err, int n) {
    FILE *f = fopen(path, "r");
    char line[512];
    int lineno = 0;
    if (!f) { snprintf(err, n, "cannot open scenario %s", path); return 0; }
    while (fgets(line, sizeof line, f)) {
        char why[256] = "";
        lineno++;
        if (!fake_apply_line(line, why, sizeof why)) {
            snprintf(err, n, "%s:%d: %s", path, lineno, why);
            fclose(f);
            return 0;
        }
    }
    fclose(f);
    return 1;
}

/* ---- exported scripting API (tests call these through ctypes) ---- */

void fakenvml_reset(int count) {
    pthread_mutex_lock(&fake.lock);
    fake_reset_locked(count);
    fake.init_refcount = 0;
    fake.gpm_samples_live = 0; /* a test counts its own collector's samples */
    fake.scenario_loaded = 1; /* in-process tests script the fake themselves */
    pthread_mutex_unlock(&fake.lock);
}

int fakenvml_directive(const char *line) {
    char copy[512], err[256] = "";
    snprintf(copy, sizeof copy, "%s", line);
    pthread_mutex_lock(&fake.lock);
    int ok = fake_apply_line(copy, err, sizeof err);
    pthread_mutex_unlock(&fake.lock);
    if (!ok) fprintf(stderr, "fake_nvml: %s\n", err);
    return ok;
}

void fakenvml_set_time(double seconds) {
    pthread_mutex_lock(&fake.lock);
    fake.frozen = 1;
    fake.fixed_time_s = seconds;
    pthread_mutex_unlock(&fake.lock);
}

long long fakenvml_calls(int index) {
    pthread_mutex_lock(&fake.lock);
    long long n = index >= 0 && index < FAKE_MAX_DEVICES ? fake.dev[index].calls : -1;
    pthread_mutex_unlock(&fake.lock);
    return n;
}

int fakenvml_gpm_samples_live(void) {
    pthread_mutex_lock(&fake.lock);
    int n = fake.gpm_samples_live;
    pthread_mutex_unlock(&fake.lock);
    return n;
}

int fakenvml_init_refcount(void) {
    pthread_mutex_lock(&fake.lock);
    int n = fake.init_refcount;
    pthread_mutex_unlock(&fake.lock);
    return n;
}
