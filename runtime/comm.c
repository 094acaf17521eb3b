// comm.c — the communicator (comm.h): the launcher's environment, libftc_mpi.so opened with
// dlopen, and the plan's collectives on host-addressable memory built from two exchanges
// MPI does well, all-to-all and all-gather, with the arithmetic here so that its order is
// fixed: a reduction sends each rank its slice of every member of the bucket (all-to-all),
// sums each element over the ranks in rank order in fp32 and rounds it once, and an
// all-reduce then all-gathers the reduced slices. A bucket travels as one message.
#include "comm.h"
#include "session.h"
#include "fileio.h"
#include "mpi/ftc_mpi.h"
#include "cpu/kernels.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The first of these set in the environment, as an integer; -1 when none is.
static long env_int(const char *const *names) {
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        char *end;
        if (v && *v) {
            long n = strtol(v, &end, 10);
            if (!*end && n >= 0 && n < INT_MAX)
                return n;
        }
    }
    return -1;
}

void rt_launch_env(int *rank, int *ranks, const char **launcher) {
    static const char *const mpi_size[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", NULL};
    static const char *const mpi_rank[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK",
                                           "PMIX_RANK", NULL};
    static const char *const slurm_size[] = {"SLURM_NTASKS", "SLURM_NPROCS", NULL};
    static const char *const slurm_rank[] = {"SLURM_PROCID", NULL};
    long n = env_int(mpi_size), r = env_int(mpi_rank);
    *launcher = n > 0 ? "mpirun" : NULL;
    if (n <= 0 && getenv("SLURM_STEP_ID")) {   // inside a job step: srun started it
        n = env_int(slurm_size), r = env_int(slurm_rank);
        *launcher = n > 0 ? "srun" : NULL;
    }
    *ranks = n > 0 ? (int)n : 1;
    *rank = n > 0 && r >= 0 && r < n ? (int)r : 0;
}

int rt_launch_local_rank(void) {
    static const char *const local[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                        "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", NULL};
    long r = env_int(local);
    return r >= 0 ? (int)r : 0;
}

// libftc_mpi.so: $FTC_MPI_LIB, beside the ftc binary, in ../lib/ftc/, or on the library path.
static void *open_lib(char *why, size_t len) {
    char self[4096], path[4200];
    const char *env = getenv("FTC_MPI_LIB");
    const char *tries[4];
    int n = 0;
    if (env && *env)
        tries[n++] = env;
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    char beside[4200] = "", above[4200] = "";
    if (k > 0) {
        self[k] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(beside, sizeof beside, "%s/libftc_mpi.so", self);
            snprintf(above, sizeof above, "%s/../lib/ftc/libftc_mpi.so", self);
            tries[n++] = beside, tries[n++] = above;
        }
    }
    tries[n++] = "libftc_mpi.so";
    why[0] = '\0';
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s", tries[i]);
        // Global: Open MPI's own components, which it opens in turn, resolve against it.
        void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (h)
            return h;
        if (!why[0] || (env && i == 0))
            snprintf(why, len, "%s", dlerror());
    }
    return NULL;
}

Comm *rt_comm_open(int ranks, double timeout_s, char *err, size_t errlen) {
    Comm *c = xcalloc(1, sizeof *c);
    int rank, size;
    rt_launch_env(&rank, &size, &c->launcher);
    c->timeout_s = timeout_s > 0 ? timeout_s : COMM_DEFAULT_TIMEOUT_S;
    c->rank = 0, c->ranks = 1;
    if (ranks <= 1 && size <= 1)
        return c;
    if (size != ranks) {
        if (size <= 1 && !c->launcher)
            rt_fail(err, errlen, "the plan is for %d ranks: start it with mpirun -np %d (or srun -n %d) "
                    "%s ...", ranks, ranks, ranks, rt_run_command());
        else if (size <= 1)
            rt_fail(err, errlen, "%s started 1 rank, but the plan is for %d (start %d: mpirun -np %d)",
                    c->launcher, ranks, ranks, ranks);
        else
            rt_fail(err, errlen, "rank %d of %d: %s started %d ranks, but the plan is for %d (ftc "
                    "compile --ranks %d)", rank, size, c->launcher, size, ranks, size);
        free(c);
        return NULL;
    }
    char why[1024];
    c->lib = open_lib(why, sizeof why);
    FtcMpiOpenFn open = c->lib ? (FtcMpiOpenFn)dlsym(c->lib, FTC_MPI_OPEN) : NULL;
    c->mpi = open ? open() : NULL;
    if (!c->mpi || c->mpi->abi != FTC_MPI_ABI) {
        rt_fail(err, errlen, "rank %d of %d: cannot load libftc_mpi.so, which ftc needs for a job of "
                "several ranks (it is built beside ftc where an MPI is installed; $FTC_MPI_LIB names "
                "it): %s", rank, size, c->lib ? "it is of another version" : why);
        if (c->lib)
            dlclose(c->lib);
        free(c);
        return NULL;
    }
    if (c->mpi->init(&c->rank, &c->ranks, why, sizeof why) != 0) {
        rt_fail(err, errlen, "rank %d of %d: %s", rank, size, why);
        free(c);   // (MPI stays loaded: it cannot be unloaded once initialised)
        return NULL;
    }
    if (c->ranks != ranks) {
        rt_fail(err, errlen, "rank %d: MPI sees %d ranks, the plan is for %d", c->rank, c->ranks, ranks);
        c->mpi->abort(1);
    }
    return c;
}

void rt_comm_close(Comm *c) {
    if (!c)
        return;
    if (c->mpi)
        c->mpi->finalize();
    free(c->scratch);
    free(c);
}

void rt_comm_abort(Comm *c, int code) {
    if (c && c->mpi) {
        fflush(stdout), fflush(stderr);
        c->mpi->abort(code);
    }
}

// A failed or timed-out exchange, said with what waited for it.
static int said(int rc, const char *what, const char *why, char *err, size_t errlen) {
    if (rc == 0)
        return 0;
    return rt_fail(err, errlen, "%s: %s%s", what, why,
                   rc > 0 ? " (a rank died or hangs; the job ends)" : "");
}

int rt_comm_sum(Comm *c, double *v, int n, char *err, size_t errlen) {
    if (!c || !c->mpi)
        return 0;
    char why[512];
    return said(c->mpi->sum_f64(v, n, c->timeout_s, why, sizeof why), "summing over the ranks", why,
                err, errlen);
}

int rt_comm_bcast(Comm *c, void *buf, int64_t bytes, int root, char *err, size_t errlen) {
    if (!c || !c->mpi)
        return 0;
    char why[512];
    return said(c->mpi->bcast(buf, bytes, root, c->timeout_s, why, sizeof why), "a broadcast", why,
                err, errlen);
}

int rt_comm_allgather(Comm *c, const void *mine, void *all, int64_t bytes, char *err, size_t errlen) {
    if (!c || !c->mpi) {
        memmove(all, mine, (size_t)bytes);
        return 0;
    }
    char why[512];
    return said(c->mpi->allgather(mine, all, bytes, c->timeout_s, why, sizeof why), "gathering from "
                "the ranks", why, err, errlen);
}

int rt_comm_barrier(Comm *c, char *err, size_t errlen) {
    if (!c || !c->mpi)
        return 0;
    char why[512];
    return said(c->mpi->barrier(c->timeout_s, why, sizeof why), "waiting for the other ranks", why,
                err, errlen);
}

//
// Collectives.
//

// One member of a bucket: its buffers, elements and the slice each rank handles.
typedef struct Member {
    const PlanBuffer *in, *out;
    unsigned char *src, *dst;
    int64_t n, chunk;       // elements; per rank (a reduction's slice, an all-gather's part)
    int es;                 // bytes an element
    int64_t at;             // its byte offset in a rank's part of the message
} Member;

static int elem_bytes(PlanDType t) { return t == PDT_F32 || t == PDT_I32 ? 4 : t == PDT_U8 ? 1 : 2; }

static float widen(PlanDType t, const unsigned char *p) {
    if (t == PDT_F32) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return t == PDT_BF16 ? cpu_bf16_to_f32(h) : cpu_f16_to_f32(h);
}

static void narrow(PlanDType t, unsigned char *p, float v) {
    if (t == PDT_F32) {
        memcpy(p, &v, 4);
        return;
    }
    uint16_t h = t == PDT_BF16 ? cpu_f32_to_bf16(v) : cpu_f32_to_f16(v);
    memcpy(p, &h, 2);
}

// The members of the bucket `in` begins, with their slices and offsets in a rank's part;
// the part's bytes.
static int64_t members(const Plan *p, int ranks, Exec *x, const PlanInstr *in, Member *m, int *count) {
    int n = in->group > 0 ? in->group : 1;
    int64_t part = 0;
    for (int k = 0; k < n; k++) {
        const PlanInstr *it = plan_instr(p, in->id + k);
        Member *e = &m[k];
        e->in = &p->buf[it->in[0]], e->out = &p->buf[it->out[0]];
        e->src = x ? x->ptr[it->in[0]] : NULL, e->dst = x ? x->ptr[it->out[0]] : NULL;
        e->es = e->in->dtype == PDT_NF4 ? 1 : elem_bytes(e->in->dtype);
        e->n = e->in->dtype == PDT_NF4 ? plan_dtype_bytes(PDT_NF4, plan_elems(e->in)) : plan_elems(e->in);
        e->chunk = in->op == OP_ALL_GATHER ? e->n : (e->n + ranks - 1) / ranks;
        e->at = part;
        part += e->chunk * e->es;
    }
    *count = n;
    return part;
}

// Staging a bucket needs: for a reduction, every rank's part sent and received, and this
// rank's reduced part; for an all-gather, this rank's part and every rank's.
static int64_t staging(const PlanInstr *in, int ranks, int64_t part) {
    return in->op == OP_ALL_GATHER ? part * (ranks + 1) : part * (2 * (int64_t)ranks + 1);
}

int rt_comm_prepare(Comm *c, const Plan *p, char *err, size_t errlen) {
    int64_t most = 0;
    Member *m = xmalloc(sizeof *m * PLAN_GROUP_MAX);
    for (int id = 0; id < plan_instr_count(p); id++) {
        const PlanInstr *in = plan_instr(p, id);
        if (op_desc(in->op)->cls != OPC_COLLECTIVE || in->by >= 0)
            continue;
        int n;
        int64_t need = staging(in, c->ranks, members(p, c->ranks, NULL, in, m, &n));
        most = need > most ? need : most;
    }
    free(m);
    if ((size_t)most <= c->cap)
        return 0;
    free(c->scratch);
    c->scratch = malloc((size_t)most + 64);
    c->cap = c->scratch ? (size_t)most : 0;
    if (!c->scratch)
        return rt_fail(err, errlen, "out of memory for the collectives' staging (%lld bytes)",
                       (long long)most);
    return 0;
}

static int exchange(Comm *c, bool all_to_all, const void *send, void *recv, int64_t part, char *why,
                    size_t len) {
    if (!c || !c->mpi) {
        memmove(recv, send, (size_t)part);
        return 0;
    }
    return all_to_all ? c->mpi->alltoall(send, recv, part, c->timeout_s, why, len)
                      : c->mpi->allgather(send, recv, part, c->timeout_s, why, len);
}

int rt_comm_collective(Comm *c, Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int R = c ? c->ranks : 1, n;
    if (R != p->ranks)
        return rt_fail(err, errlen, "the plan is for %d ranks, this job has %d", p->ranks, R);
    Member m[PLAN_GROUP_MAX];
    int64_t part = members(p, R, x, in, m, &n);
    if (c && c->scratch && (size_t)staging(in, R, part) > c->cap)
        return rt_fail(err, errlen, "the collectives' staging was sized for another plan");
    // Prepared: the staging made before step one; else (a test's executor) one for the call.
    bool own = !c || !c->scratch;
    unsigned char *s = own ? xmalloc((size_t)staging(in, R, part) + 1) : c->scratch;
    if (!s)
        return rt_fail(err, errlen, "out of memory for a collective");
    char why[512], what[160];
    char sz[32];
    snprintf(what, sizeof what, "%s of %d tensor%s (%s a rank)", op_desc(in->op)->name, n, n == 1 ? "" : "s",
             fmt_bytes(sz, sizeof sz, part));
    int rc = 0;
    if (in->op == OP_ALL_GATHER) {   // this rank's part; every rank's into place
        unsigned char *mine = s, *all = s + part;
        for (int k = 0; k < n; k++)
            memcpy(mine + m[k].at, m[k].src, (size_t)(m[k].chunk * m[k].es));
        rc = exchange(c, false, mine, all, part, why, sizeof why);
        for (int q = 0; rc == 0 && q < R; q++)
            for (int k = 0; k < n; k++)
                memcpy(m[k].dst + q * m[k].chunk * m[k].es, all + q * part + m[k].at,
                       (size_t)(m[k].chunk * m[k].es));
    } else {   // rank q's slice of every member to rank q; each element summed in rank order
        unsigned char *send = s, *recv = s + R * part, *mine = recv + R * part;
        for (int q = 0; q < R; q++)
            for (int k = 0; k < n; k++) {
                int64_t lo = q * m[k].chunk, hi = lo + m[k].chunk > m[k].n ? m[k].n : lo + m[k].chunk;
                unsigned char *to = send + q * part + m[k].at;
                memset(to, 0, (size_t)(m[k].chunk * m[k].es));
                if (hi > lo)
                    memcpy(to, m[k].src + lo * m[k].es, (size_t)((hi - lo) * m[k].es));
            }
        rc = exchange(c, true, send, recv, part, why, sizeof why);
        for (int k = 0; rc == 0 && k < n; k++) {
            PlanDType t = m[k].in->dtype;
            for (int64_t e = 0; e < m[k].chunk; e++) {
                int64_t off = m[k].at + e * m[k].es;
                float acc = widen(t, recv + off);
                for (int q = 1; q < R; q++)
                    acc += widen(t, recv + q * part + off);
                narrow(t, mine + off, acc);
            }
        }
        if (rc == 0 && in->op == OP_REDUCE_SCATTER) {
            for (int k = 0; k < n; k++)
                memcpy(m[k].dst, mine + m[k].at, (size_t)(m[k].chunk * m[k].es));
        } else if (rc == 0) {   // all-reduce: every rank's reduced slice into place
            rc = exchange(c, false, mine, recv, part, why, sizeof why);
            for (int q = 0; rc == 0 && q < R; q++)
                for (int k = 0; k < n; k++) {
                    int64_t lo = q * m[k].chunk, hi = lo + m[k].chunk > m[k].n ? m[k].n : lo + m[k].chunk;
                    if (hi > lo)
                        memcpy(m[k].dst + lo * m[k].es, recv + q * part + m[k].at,
                               (size_t)((hi - lo) * m[k].es));
                }
        }
    }
    if (own)
        free(s);
    return said(rc, what, why, err, errlen);
}
