// gpu.c — GPU presets (REFERENCE.md §5). Memory sizes follow each card's label:
// "40G" cards have 40 GiB, "24 GB" cards 24·10^9 bytes; the H200's 141 GB shows
// as about 139 GiB usable.
#include "passes.h"

#include <string.h>

#define GiB(x) ((int64_t)(x) << 30)
#define MiB(x) ((int64_t)(x) << 20)

static const GpuPreset presets[] = {
    {"a100-40g", GiB(40), 312, 1555, 25, MiB(512), MiB(4), "sm_80"},
    {"a100-80g", GiB(80), 312, 2039, 25, MiB(512), MiB(4), "sm_80"},
    {"h100-80g", GiB(80), 989, 3350, 50, MiB(512), MiB(32), "sm_90"},
    {"h200", GiB(139), 989, 4800, 50, MiB(512), MiB(32), "sm_90"},
    {"l4", 24000000000LL, 121, 300, 25, MiB(512), MiB(4), "sm_89"},
    {"rtx4090", GiB(24), 165, 1008, 25, MiB(512), MiB(4), "sm_89"},
};

const GpuPreset *gpu_preset(const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

const GpuPreset *gpu_presets(int *n) {
    *n = (int)(sizeof presets / sizeof presets[0]);
    return presets;
}
