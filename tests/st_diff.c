// st_diff.c — compares two safetensors files tensor by tensor: same names and shapes,
// and ||a - b||₂ / ||b||₂ per tensor no larger than TOL, for tensors of at least
// MIN_ELEMS elements (smaller ones are checked for presence and shape only). Prints the
// worst tensor.
//     st_diff A.safetensors B.safetensors TOL [MIN_ELEMS]
#include "../runtime/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5)
        return fprintf(stderr, "usage: st_diff A B TOL [MIN_ELEMS]\n"), 2;
    long long min_elems = argc == 5 ? atoll(argv[4]) : 0;
    char err[1024];
    StSet *a, *b;
    if (st_open(&a, argv[1], err, sizeof err) || st_open(&b, argv[2], err, sizeof err))
        return fprintf(stderr, "%s\n", err), 2;
    double tol = atof(argv[3]), worst = 0;
    const char *worst_name = "";
    int bad = st_count(a) != st_count(b);
    for (int i = 0; i < st_count(a) && !bad; i++) {
        const StTensor *x = st_at(a, i), *y = st_find(b, x->name);
        if (!y || st_elems(x) != st_elems(y)) {
            printf("%s: missing or reshaped in %s\n", x->name, argv[2]);
            bad = 1;
            break;
        }
        int64_t n = st_elems(x);
        if (n < min_elems)
            continue;
        float *u = malloc(sizeof(float) * (size_t)n), *v = malloc(sizeof(float) * (size_t)n);
        st_read_f32(a, x, u, n, err, sizeof err);
        st_read_f32(b, y, v, n, err, sizeof err);
        double d = 0, m = 0;
        for (int64_t k = 0; k < n; k++)
            d += ((double)u[k] - v[k]) * ((double)u[k] - v[k]), m += (double)v[k] * v[k];
        double e = m > 0 ? sqrt(d / m) : sqrt(d);
        if (e >= worst)
            worst = e, worst_name = x->name;
        free(u), free(v);
    }
    printf("%d tensors, worst ||a-b||/||b|| %.3g (%s), tolerance %g\n", st_count(a), worst,
           worst_name, tol);
    int rc = bad || worst > tol;
    st_close(a), st_close(b);
    return rc;
}
