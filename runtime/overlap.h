// overlap.h — who held a byte before whom. The planner's streams pass and the plan
// verifier both order the buffers the allocator placed on the same bytes one after the
// other; both learn those successions here, in O(n log n + n·f) for n buffers and f
// the fragments of the arena (never over all n² pairs).
#ifndef FTC_RUNTIME_OVERLAP_H
#define FTC_RUNTIME_OVERLAP_H

#include <stdint.h>

typedef struct ByteSpan {
    int id;                 // the caller's id (a tensor, a buffer)
    int arena;              // spans in different arenas never share a byte
    int64_t offset, bytes;  // [offset, offset + bytes), bytes > 0
    int birth;              // when it takes its bytes (its first instruction)
} ByteSpan;

// Walks the spans in order of birth (ties by id), each taking its bytes over, and calls
// fn(prev, next, ctx) for every span prev that held some byte of next's last, just
// before next took it (once each, unless next covers more than 64 pieces). With
// lifetimes on shared bytes apart in time (a valid plan), these successions order every
// byte's holders: any two holders of a byte are joined by a chain of them. Sorts r.
void byte_successions(ByteSpan *r, int n, void (*fn)(int prev, int next, void *ctx), void *ctx);

#endif
