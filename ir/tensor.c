// tensor.c — what a tensor is, apart from any graph's nodes (its dtype the op
// contract's): memory categories, a tensor's elements, bytes, base and shape text.
#include "ir.h"


#include <stdio.h>
#include <string.h>

static const char *categories[MEM_COUNT] = {
    [MEM_WEIGHTS] = "weights",         [MEM_GRADS] = "grads",
    [MEM_OPTIMIZER] = "optimizer",     [MEM_MASTER] = "master",
    [MEM_ACTIVATIONS] = "activations", [MEM_RECOMPUTE] = "recompute",
    [MEM_TEMPORARIES] = "temporaries", [MEM_WORKSPACE] = "workspace",
    [MEM_IO] = "io",                   [MEM_RESERVE] = "reserve",
    [MEM_KV_CACHE] = "kv_cache",       [MEM_REFERENCE] = "reference",
};

const char *mem_category_name(MemCategory c) { return c < MEM_COUNT ? categories[c] : "?"; }

int64_t ir_tensor_elems(const IrTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int64_t ir_tensor_bytes(const IrTensor *t) {
    return t->alias_of >= 0 || t->virt ? 0 : dtype_bytes(t->dtype, ir_tensor_elems(t));
}

int ir_tensor_base(const IrGraph *g, int id) {
    while (g->tensors.at[id].alias_of >= 0)
        id = g->tensors.at[id].alias_of;
    return id;
}

int ir_shape_str(char *buf, size_t cap, const IrTensor *t) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s[", dtype_name(t->dtype));
    for (int i = 0; i < t->ndim; i++)
        n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%lld", i ? ", " : "",
                              (long long)t->shape[i]);
    n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "]");
    return (int)n;
}

bool ir_same_shape(const IrTensor *a, const IrTensor *b) {
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

int ir_dim_index(int d, int ndim) {
    if (d < 0)
        d += ndim;
    return d >= 0 && d < ndim ? d : -1;
}
