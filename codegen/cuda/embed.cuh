/* embed.cuh — the embedding lookup and its gradient. The gradient is deterministic and
 * free of float atomics: a first launch (one warp) sorts the token positions by id, stably
 * (a counting sort in the workspace), and a second runs one block per vocabulary row,
 * adding that row's dy rows in increasing position, the order the cpu backend adds them
 * in: results are bitwise the cpu backend's. */

/* out[n, c] = table[ids[n], c]; an id outside the vocabulary gives NaN (the runtime checks
 * the data before it runs).  a.p: out [N, C], table [V, C], ids i32 [N]. */
FTC_INLINE void embed_fwd(FtcArgs a, long long N, int C, long long V, int dttab, int dtout, int v8) {
    const int *ids = (const int *)a.p[2];
    int w = v8 ? 8 : 1;   /* elements a thread a step: eight of a row (C % 8 == 0), or one */
    for (long long i = ftc_gid() * w; i < N * C; i += ftc_gstride() * w) {
        long long n = i / C, id = ids[n];
        float v[8];
        if (id >= 0 && id < V) {
            ldn(a.p[1], id * C + i % C, dttab, v8, v);
        } else {
            FTC_UNROLL
            for (int e = 0; e < w; e++)
                v[e] = FTC_INF - FTC_INF;
        }
        stn(a.p[0], i, dtout, v8, v);
    }
}

/* Launch 1, one warp: ws = off [V + 1] then perm [N], int. Afterwards perm lists the
 * positions grouped by id, increasing within each id, and id v's positions are
 * perm[v ? off[v - 1] : 0 .. off[v]).  a.p: dtable, dy, ids, ws. */
FTC_INLINE void embed_bwd_index(FtcArgs a, long long N, long long V) {
    const int *ids = (const int *)a.p[2];
    int *off = (int *)a.p[3], *perm = off + V + 1;
    int lane = threadIdx.x;
    for (long long v = lane; v <= V; v += 32)
        off[v] = 0;
    __syncwarp(0xffffffffu);
    for (long long n = lane; n < N; n += 32) {   /* counts of id v land in off[v + 1] */
        int id = ids[n];
        if (id >= 0 && id < V)
            atomicAdd(&off[id + 1], 1);
    }
    __syncwarp(0xffffffffu);
    int carry = 0;   /* inclusive scan of off[1..V]: off[v] = positions with id < v */
    for (long long base = 1; base <= V; base += 32) {
        int x = base + lane <= V ? off[base + lane] : 0;
        for (int d = 1; d < 32; d *= 2) {
            int y = __shfl_up_sync(0xffffffffu, x, d);
            if (lane >= d)
                x += y;
        }
        if (base + lane <= V)
            off[base + lane] = x + carry;
        carry += __shfl_sync(0xffffffffu, x, 31);
    }
    __syncwarp(0xffffffffu);
    for (long long base = 0; base < N; base += 32) {   /* stable scatter, 32 positions a round */
        long long n = base + lane;
        int id = n < N ? ids[n] : -1;
        if (id >= V)
            id = -1;
        int rank = 0, count = 0;
        for (int j = 0; j < 32; j++) {
            int other = __shfl_sync(0xffffffffu, id, j);
            count += other == id;
            rank += other == id && j < lane;
        }
        if (id >= 0)
            perm[off[id] + rank] = (int)n;
        __syncwarp(0xffffffffu);
        if (id >= 0 && rank == count - 1)
            off[id] += count;
        __syncwarp(0xffffffffu);
    }
}

/* Launch 2, one block per id v: dtable[v, :] (+)= the sum of dy over v's positions (none
 * for the padding id `pad`, -1 for none).  a.p: dtable [V, C], dy [N, C], ids, ws. */
FTC_INLINE void embed_bwd_sum(FtcArgs a, long long V, int C, int update, long long pad, int dtdy,
                              int dtout) {
    const int *off = (const int *)a.p[3], *perm = off + V + 1;
    long long v = blockIdx.x;
    if (v >= V)
        return;
    int start = v ? off[v - 1] : 0, end = off[v];
    if (v == pad)
        start = end;
    if (update && start == end)
        return;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = update ? ldf(a.p[0], v * C + c, dtout) : 0.0f;
        for (int j = start; j < end; j++)
            acc += ldf(a.p[1], (long long)perm[j] * C + c, dtdy);
        stf(a.p[0], v * C + c, dtout, acc);
    }
}
