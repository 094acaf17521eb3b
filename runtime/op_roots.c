// op_roots.c — the owners of bytes: a holder of bytes (a tensor, a plan's buffer) is a
// view of another or takes another's bytes when it dies (reuse); following those links
// ends at the holder that owns the bytes, the root. The compiler's allocator and the plan's
// readers find roots the same way, here.
#include "ops.h"

void op_roots(int n, const int *next, int *root) {
    int *stack = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        root[i] = -1;
    for (int i = 0; i < n; i++) {   // each link followed once: in-place chains can be long
        int k = 0, t = i;
        while (root[t] < 0) {
            if (next[t] < 0) {
                root[t] = t;
                break;
            }
            stack[k++] = t;
            t = next[t];
        }
        while (k > 0)
            root[stack[--k]] = root[t];
    }
    free(stack);
}
