// size.c — byte sizes as users write them. G/GiB are 2^30 bytes, GB is 10^9;
// the same rule holds for K, M, T. The one parser for the CLI and for .ft files.
#include "frontend.h"

#include <ctype.h>
#include <math.h>

static const struct { const char *suffix; double mul; } units[] = {
    {"", 1},         {"B", 1},
    {"K", 0x1p10},   {"KiB", 0x1p10}, {"KB", 1e3},
    {"M", 0x1p20},   {"MiB", 0x1p20}, {"MB", 1e6},
    {"G", 0x1p30},   {"GiB", 0x1p30}, {"GB", 1e9},
    {"T", 0x1p40},   {"TiB", 0x1p40}, {"TB", 1e12},
};

int fe_size_parse(const char *s, int64_t *bytes, char *why, size_t whylen) {
    const char *p = s;
    if (!isdigit((unsigned char)*p)) {
        snprintf(why, whylen, "bad size '%s': expected a number such as 40G", s);
        return -1;
    }
    while (isdigit((unsigned char)*p))
        p++;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) {
            snprintf(why, whylen, "bad size '%s': expected digits after '.'", s);
            return -1;
        }
        while (isdigit((unsigned char)*p))
            p++;
    }
    double v = strtod(s, NULL);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(p, units[i].suffix) == 0) {
            double b = v * units[i].mul;
            if (!(b < 0x1p62)) {
                snprintf(why, whylen, "size '%s' is too large", s);
                return -1;
            }
            if (b != floor(b)) {
                snprintf(why, whylen, "size '%s' is not a whole number of bytes", s);
                return -1;
            }
            *bytes = (int64_t)b;
            return 0;
        }
    snprintf(why, whylen,
             "bad size suffix '%s' in '%s' (use K, M, G, T for powers of 2, "
             "KiB..TiB likewise, KB..TB for powers of 10)", p, s);
    return -1;
}

