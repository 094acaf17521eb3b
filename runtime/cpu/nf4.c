// nf4.c: NF4 quantisation bit-exact with bitsandbytes on the CPU; see nf4.h for the contracts,
// the layout and the rounding rules. Plain loops over fp32, no allocation, no global state
// beyond the constant tables. Compile as ISO C11 with -ffp-contract=off: every a*b+c below
// must round twice, except the fmaf calls, which stand for fusions torch/bitsandbytes do.
#include "nf4.h"

#include <math.h>

// bitsandbytes get_4bit_type("nf4") as fp32 (hex: exact):
// -1, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
// -0.18477343022823334, -0.09105003625154495, 0, 0.07958029955625534, 0.16093020141124725,
// 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
// 0.7229568362236023, 1.
const float cpu_nf4_code[16] = {
    -0x1p+0f, -0x1.647362p-1f, -0x1.0cd66p-1f, -0x1.94654p-2f,
    -0x1.23449ap-2f, -0x1.7a6a7ep-3f, -0x1.74f0e2p-4f, 0x0p+0f,
    0x1.45f5fep-4f, 0x1.4995c6p-3f, 0x1.f809bap-3f, 0x1.5a0674p-2f,
    0x1.c3497p-2f, 0x1.200f56p-1f, 0x1.722766p-1f, 0x1p+0f,
};

// bitsandbytes create_dynamic_map(signed=True), fp32, as printed by tests/fixtures/make_nf4.py
// (also in the fixture as "dynamic_map"; cpu_nf4_dynamic_map recomputes it).
const float cpu_nf4_dynamic_code[256] = {
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f, // 0..3
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f, // 4..7
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f, // 8..11
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f, // 12..15
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f, // 16..19
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f, // 20..23
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f, // 24..27
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f, // 28..31
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f, // 32..35
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f, // 36..39
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f, // 40..43
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f, // 44..47
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f, // 48..51
    -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f, // 52..55
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f, // 56..59
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f, // 60..63
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f, // 64..67
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f, // 68..71
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f, // 72..75
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f, // 76..79
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f, // 80..83
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f, // 84..87
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f, // 88..91
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f, // 92..95
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f, // 96..99
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f, // 100..103
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f, // 104..107
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f, // 108..111
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f, // 112..115
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f, // 116..119
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, // 120..123
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0x0p+0f, // 124..127
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f, // 128..131
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f, // 132..135
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f, // 136..139
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f, // 140..143
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f, // 144..147
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f, // 148..151
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f, // 152..155
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f, // 156..159
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f, // 160..163
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f, // 164..167
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f, // 168..171
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f, // 172..175
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f, // 176..179
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f, // 180..183
    0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f, // 184..187
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f, // 188..191
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f, // 192..195
    0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f, // 196..199
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f, // 200..203
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f, // 204..207
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f, // 208..211
    0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f, // 212..215
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f, // 216..219
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f, // 220..223
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f, // 224..227
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f, // 228..231
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f, // 232..235
    0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f, // 236..239
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f, // 240..243
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f, // 244..247
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f, // 248..251
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1p+0f, // 252..255
};

// bitsandbytes create_dynamic_map(signed=False), fp32 (AdamW8bit's map for the second moment),
// as printed by cpu_dynamic_map(code, false); tests/fixtures/adamw8bit/ holds bitsandbytes' own.
const float cpu_dynamic_unsigned_code[256] = {
    0x0p+0f, 0x1.5cf754p-22f, 0x1.a0133p-21f, 0x1.1d367p-19f, // 0..3
    0x1.2599ecp-18f, 0x1.bc98a2p-18f, 0x1.29cbaap-17f, 0x1.0624dcp-16f, // 4..7
    0x1.c2e34p-16f, 0x1.3fd0dp-15f, 0x1.9e3p-15f, 0x1.fc8f34p-15f, // 8..11
    0x1.2d7732p-14f, 0x1.5ca6c8p-14f, 0x1.8bd662p-14f, 0x1.0cb296p-13f, // 12..15
    0x1.82a994p-13f, 0x1.f8a092p-13f, 0x1.374bc8p-12f, 0x1.724744p-12f, // 16..19
    0x1.ad42c6p-12f, 0x1.e83e44p-12f, 0x1.119ce2p-11f, 0x1.2f1aap-11f, // 20..23
    0x1.4c986p-11f, 0x1.6a162p-11f, 0x1.8793dep-11f, 0x1.a511ap-11f, // 24..27
    0x1.c28f5ep-11f, 0x1.e00d1cp-11f, 0x1.fd8adcp-11f, 0x1.2b020cp-10f, // 28..31
    0x1.74bc6ap-10f, 0x1.be76c8p-10f, 0x1.041894p-9f, 0x1.28f5c2p-9f, // 32..35
    0x1.4dd2fp-9f, 0x1.72b02p-9f, 0x1.978d4ep-9f, 0x1.bc6a8p-9f, // 36..39
    0x1.e147aep-9f, 0x1.03126ep-8f, 0x1.158104p-8f, 0x1.27ef9ep-8f, // 40..43
    0x1.3a5e34p-8f, 0x1.4cccccp-8f, 0x1.5f3b64p-8f, 0x1.71a9fap-8f, // 44..47
    0x1.841894p-8f, 0x1.96872ap-8f, 0x1.a8f5c2p-8f, 0x1.bb645cp-8f, // 48..51
    0x1.cdd2fp-8f, 0x1.e0418ap-8f, 0x1.f2b01ep-8f, 0x1.028f5cp-7f, // 52..55
    0x1.0bc6a8p-7f, 0x1.14fdf2p-7f, 0x1.1e354p-7f, 0x1.276c8ap-7f, // 56..59
    0x1.30a3d6p-7f, 0x1.39db24p-7f, 0x1.43126ep-7f, 0x1.5eb854p-7f, // 60..63
    0x1.8ccccep-7f, 0x1.bae146p-7f, 0x1.e8f5c4p-7f, 0x1.0b851ep-6f, // 64..67
    0x1.228f5ep-6f, 0x1.39999ap-6f, 0x1.50a3d6p-6f, 0x1.67ae16p-6f, // 68..71
    0x1.7eb852p-6f, 0x1.95c28ep-6f, 0x1.accccep-6f, 0x1.c3d70ep-6f, // 72..75
    0x1.dae146p-6f, 0x1.f1eb86p-6f, 0x1.047aep-5f, 0x1.1p-5f, // 76..79
    0x1.1b851ep-5f, 0x1.270a3ep-5f, 0x1.328f5ep-5f, 0x1.3e147ap-5f, // 80..83
    0x1.49999ap-5f, 0x1.551eb8p-5f, 0x1.60a3d6p-5f, 0x1.6c28f6p-5f, // 84..87
    0x1.77ae14p-5f, 0x1.833334p-5f, 0x1.8eb85p-5f, 0x1.9a3d7p-5f, // 88..91
    0x1.a5c28ep-5f, 0x1.b147aep-5f, 0x1.bccccep-5f, 0x1.c851eep-5f, // 92..95
    0x1.d3d70ep-5f, 0x1.df5c2ap-5f, 0x1.eae146p-5f, 0x1.f66666p-5f, // 96..99
    0x1.00f5c4p-4f, 0x1.06b854p-4f, 0x1.0c7ae2p-4f, 0x1.123d7p-4f, // 100..103
    0x1.18p-4f, 0x1.1dc29p-4f, 0x1.23852p-4f, 0x1.2947aep-4f, // 104..107
    0x1.2f0a3ep-4f, 0x1.34cccep-4f, 0x1.3a8f5ep-4f, 0x1.4051ecp-4f, // 108..111
    0x1.46147cp-4f, 0x1.4bd70ap-4f, 0x1.51999ap-4f, 0x1.575c2ap-4f, // 112..115
    0x1.5d1eb8p-4f, 0x1.62e148p-4f, 0x1.68a3d6p-4f, 0x1.6e6666p-4f, // 116..119
    0x1.7428f6p-4f, 0x1.79eb86p-4f, 0x1.7fae16p-4f, 0x1.8570a4p-4f, // 120..123
    0x1.8b3334p-4f, 0x1.90f5c4p-4f, 0x1.96b852p-4f, 0x1.a8p-4f, // 124..127
    0x1.c4ccccp-4f, 0x1.e1999ap-4f, 0x1.fe6666p-4f, 0x1.0d9998p-3f, // 128..131
    0x1.1cp-3f, 0x1.2a6668p-3f, 0x1.38ccccp-3f, 0x1.473334p-3f, // 132..135
    0x1.559998p-3f, 0x1.64p-3f, 0x1.726668p-3f, 0x1.80ccccp-3f, // 136..139
    0x1.8f3334p-3f, 0x1.9d9998p-3f, 0x1.acp-3f, 0x1.ba6668p-3f, // 140..143
    0x1.c8ccccp-3f, 0x1.d73334p-3f, 0x1.e59998p-3f, 0x1.f4p-3f, // 144..147
    0x1.013332p-2f, 0x1.086666p-2f, 0x1.0f999ap-2f, 0x1.16ccccp-2f, // 148..151
    0x1.1ep-2f, 0x1.253334p-2f, 0x1.2c6666p-2f, 0x1.339998p-2f, // 152..155
    0x1.3accccp-2f, 0x1.42p-2f, 0x1.493334p-2f, 0x1.506666p-2f, // 156..159
    0x1.579998p-2f, 0x1.5eccccp-2f, 0x1.66p-2f, 0x1.6d3334p-2f, // 160..163
    0x1.746666p-2f, 0x1.7b9998p-2f, 0x1.82ccccp-2f, 0x1.8ap-2f, // 164..167
    0x1.913334p-2f, 0x1.986666p-2f, 0x1.9f9998p-2f, 0x1.a6ccccp-2f, // 168..171
    0x1.aep-2f, 0x1.b53334p-2f, 0x1.bc6666p-2f, 0x1.c39998p-2f, // 172..175
    0x1.caccccp-2f, 0x1.d2p-2f, 0x1.d93334p-2f, 0x1.e06666p-2f, // 176..179
    0x1.e79998p-2f, 0x1.eeccccp-2f, 0x1.f6p-2f, 0x1.fd3332p-2f, // 180..183
    0x1.023334p-1f, 0x1.05ccccp-1f, 0x1.096666p-1f, 0x1.0dp-1f, // 184..187
    0x1.109998p-1f, 0x1.143334p-1f, 0x1.17ccccp-1f, 0x1.1b6668p-1f, // 188..191
    0x1.1fp-1f, 0x1.22999ap-1f, 0x1.263334p-1f, 0x1.29ccccp-1f, // 192..195
    0x1.2d6668p-1f, 0x1.31p-1f, 0x1.34999ap-1f, 0x1.383334p-1f, // 196..199
    0x1.3bccccp-1f, 0x1.3f6668p-1f, 0x1.43p-1f, 0x1.46999ap-1f, // 200..203
    0x1.4a3334p-1f, 0x1.4dccccp-1f, 0x1.516668p-1f, 0x1.55p-1f, // 204..207
    0x1.58999ap-1f, 0x1.5c3334p-1f, 0x1.5fccccp-1f, 0x1.636668p-1f, // 208..211
    0x1.67p-1f, 0x1.6a999ap-1f, 0x1.6e3334p-1f, 0x1.71ccccp-1f, // 212..215
    0x1.756668p-1f, 0x1.79p-1f, 0x1.7c999ap-1f, 0x1.803334p-1f, // 216..219
    0x1.83ccccp-1f, 0x1.876668p-1f, 0x1.8bp-1f, 0x1.8e9998p-1f, // 220..223
    0x1.923334p-1f, 0x1.95ccccp-1f, 0x1.996668p-1f, 0x1.9dp-1f, // 224..227
    0x1.a09998p-1f, 0x1.a43334p-1f, 0x1.a7ccccp-1f, 0x1.ab6668p-1f, // 228..231
    0x1.afp-1f, 0x1.b29998p-1f, 0x1.b63334p-1f, 0x1.b9ccccp-1f, // 232..235
    0x1.bd6668p-1f, 0x1.c1p-1f, 0x1.c49998p-1f, 0x1.c83334p-1f, // 236..239
    0x1.cbccccp-1f, 0x1.cf6668p-1f, 0x1.d3p-1f, 0x1.d69998p-1f, // 240..243
    0x1.da3334p-1f, 0x1.ddccccp-1f, 0x1.e16668p-1f, 0x1.e5p-1f, // 244..247
    0x1.e89998p-1f, 0x1.ec3334p-1f, 0x1.efccccp-1f, 0x1.f36668p-1f, // 248..251
    0x1.f7p-1f, 0x1.fa9998p-1f, 0x1.fe3334p-1f, 0x1p+0f, // 252..255
};

// ---------------------------------------------------------------------------------------------
// Tables and sizes

void cpu_dynamic_map(float *code, bool is_signed) {
    // For i = 0..6: the 2^i (signed) or 2^(i+1) (unsigned) midpoints of torch.linspace(0.1, 1,
    // that + 1, dtype=float32), times 10^(i-6) (the scale rounded to fp32 first, as torch does
    // with a Python scalar), and, signed, their negations; then 0 and 1; 127 + 127 + 2 or
    // 254 + 2 = 256 values, sorted ascending.
    static const double pow10[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    size_t m = 0;
    for (int i = 0; i < 7; i++) {
        const int steps = (1 << (is_signed ? i : i + 1)) + 1, half = steps / 2;
        const float start = (float)0.1, end = 1.0f;
        const float step = (end - start) / (float)(steps - 1);
        const float scale = (float)pow10[i];
        float prev = 0.0f;
        for (int j = 0; j < steps; j++) {
            // torch's CPU linspace: start + step*j below the halfway index, end - step*(steps-1-j)
            // from it, each a fused multiply-add (torch's vectorised kernel is built with FMA).
            float b = j < half ? fmaf(step, (float)j, start)
                               : fmaf(-step, (float)(steps - 1 - j), end);
            if (j > 0) {
                float mid = (prev + b) / 2.0f;
                code[m++] = scale * mid;
                if (is_signed)
                    code[m++] = -(scale * mid);
            }
            prev = b;
        }
    }
    code[m++] = 0.0f;
    code[m++] = 1.0f;
    for (size_t i = 1; i < m; i++) { // insertion sort, ascending (all values distinct)
        float v = code[i];
        size_t j = i;
        for (; j > 0 && code[j - 1] > v; j--) code[j] = code[j - 1];
        code[j] = v;
    }
}

void cpu_nf4_dynamic_map(float *code) { cpu_dynamic_map(code, true); }

size_t cpu_nf4_packed_bytes(size_t n) { return n / 2 + (n & 1); }

size_t cpu_nf4_blocks(size_t n) { return n / CPU_NF4_BLOCK + (n % CPU_NF4_BLOCK != 0); }

size_t cpu_nf4_absmax_scales(size_t nblocks) {
    return nblocks / CPU_NF4_DQ_BLOCK + (nblocks % CPU_NF4_DQ_BLOCK != 0);
}

size_t cpu_nf4_storage_bytes(size_t n, int double_quant) {
    size_t nb = cpu_nf4_blocks(n);
    if (!double_quant) return cpu_nf4_packed_bytes(n) + 4 * nb;
    return cpu_nf4_packed_bytes(n) + nb + 4 * cpu_nf4_absmax_scales(nb) + 4;
}

// ---------------------------------------------------------------------------------------------
// 4-bit

// The 15 decision thresholds (c[i] + c[i+1]) / 2 in fp32, as torch computes them.
static void nf4_midpoints(float *mid) { // (15)
    for (int i = 0; i < 15; i++) mid[i] = (cpu_nf4_code[i] + cpu_nf4_code[i + 1]) / 2.0f;
}

// torch.bucketize(s, mid, right=False): the number of thresholds strictly below s.
static unsigned nf4_index(float s, const float *mid) {
    unsigned q = 0;
    while (q < 15 && mid[q] < s) q++;
    return q;
}

void cpu_nf4_quantize(uint8_t *packed, float *absmax, const float *w, size_t n) {
    const float tiny = (float)1e-38; // torch clamp(min=1e-38) on fp32: a subnormal
    float mid[15];
    nf4_midpoints(mid);
    size_t nb = cpu_nf4_blocks(n);
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * CPU_NF4_BLOCK, len = n - lo < CPU_NF4_BLOCK ? n - lo : CPU_NF4_BLOCK;
        float am = 0.0f;
        for (size_t i = 0; i < len; i++) {
            float a = fabsf(w[lo + i]);
            if (a > am) am = a;
        }
        // Full blocks multiply by the reciprocal of the clamped absmax and store the unclamped
        // absmax; the trailing partial block divides by the clamped absmax and stores that.
        const int full = len == CPU_NF4_BLOCK;
        float r = 0.0f;
        if (full) {
            absmax[b] = am;
            r = 1.0f / (am > tiny ? am : tiny);
        } else {
            am = am > tiny ? am : tiny;
            absmax[b] = am;
        }
        for (size_t i = 0; i < len; i++) {
            float s = full ? w[lo + i] * r : w[lo + i] / am;
            s = s < -1.0f ? -1.0f : s > 1.0f ? 1.0f : s;
            unsigned q = nf4_index(s, mid);
            size_t e = lo + i;
            if (e % 2 == 0) packed[e / 2] = (uint8_t)(q << 4);
            else packed[e / 2] = (uint8_t)(packed[e / 2] | q);
        }
    }
    if (n % 2) packed[n / 2] = (uint8_t)(packed[n / 2] | nf4_index(0.0f, mid)); // pad: code of 0
}

void cpu_nf4_dequantize(float *w, const uint8_t *packed, const float *absmax, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned q = i % 2 == 0 ? packed[i / 2] >> 4 : packed[i / 2] & 0xfu;
        w[i] = cpu_nf4_code[q] * absmax[i / CPU_NF4_BLOCK];
    }
}

// ---------------------------------------------------------------------------------------------
// torch's float32 mean (aten/src/ATen/native/cpu/SumKernel.cpp cascade_sum, then / n)

#define TORCH_VEC 8       // lanes of torch's Vectorized<float> in its sum kernel (x86 builds)
#define TORCH_GRAIN 32768 // at::internal::GRAIN_SIZE: below it a reduction runs on one thread

static unsigned ceil_log2(size_t x) {
    if (x <= 2) return 1;
    unsigned r = 0;
    for (x -= 1; x; x >>= 1) r++;
    return r;
}

// Sums `size` rows of 4 items, each item W lanes: item (r, k) is x[(4r + k)*W .. +W).
// out[k*W + l] = sum over r of lane l of item (r, k), accumulated in levels: every 2^p rows
// level 0 is added into level 1 (and on up, each 2^p-th time), p = max(4, ceil_log2(size)/4).
static void multi_row_sum(float *out, const float *x, size_t size, size_t W) { // out (4*W)
    float acc[4][4 * TORCH_VEC] = {{0.0f}};
    const size_t m = 4 * W;
    unsigned p = ceil_log2(size) / 4;
    if (p < 4) p = 4;
    const uint64_t step = (uint64_t)1 << p, mask = step - 1;
    uint64_t i = 0;
    while (i + step <= size) {
        for (uint64_t j = 0; j < step; j++, i++)
            for (size_t e = 0; e < m; e++) acc[0][e] += x[i * m + e];
        for (unsigned j = 1; j < 4; j++) {
            for (size_t e = 0; e < m; e++) {
                acc[j][e] += acc[j - 1][e];
                acc[j - 1][e] = 0.0f;
            }
            if ((i & (mask << (j * p))) != 0) break;
        }
    }
    for (; i < size; i++)
        for (size_t e = 0; e < m; e++) acc[0][e] += x[i * m + e];
    for (unsigned j = 1; j < 4; j++)
        for (size_t e = 0; e < m; e++) acc[0][e] += acc[j][e];
    for (size_t e = 0; e < m; e++) out[e] = acc[0][e];
}

// torch's row_sum: 4-way interleaved partial sums over `size` items of W lanes, then the tail
// items into partial 0, then partials 1..3 into partial 0.
static void row_sum(float *out, const float *x, size_t size, size_t W) { // out (W)
    float ps[4 * TORCH_VEC];
    size_t ilp = size / 4;
    multi_row_sum(ps, x, ilp, W);
    for (size_t i = ilp * 4; i < size; i++)
        for (size_t l = 0; l < W; l++) ps[l] += x[i * W + l];
    for (size_t k = 1; k < 4; k++)
        for (size_t l = 0; l < W; l++) ps[l] += ps[k * W + l];
    for (size_t l = 0; l < W; l++) out[l] = ps[l];
}

// One thread's cascade_sum of x[0..n): 8-lane vectors when n >= 8 (scalar tail, then lanes
// 0..7 added in order), scalar otherwise; stored as 0 + sum.
static float torch_sum_serial(const float *x, size_t n) {
    float acc;
    if (n >= TORCH_VEC) {
        size_t nv = n / TORCH_VEC;
        float v[TORCH_VEC];
        row_sum(v, x, nv, TORCH_VEC);
        acc = 0.0f;
        for (size_t k = nv * TORCH_VEC; k < n; k++) acc += x[k];
        for (size_t l = 0; l < TORCH_VEC; l++) acc += v[l];
    } else {
        row_sum(&acc, x, n, 1);
    }
    return 0.0f + acc;
}

float cpu_nf4_mean(const float *x, size_t n, int torch_threads) {
    size_t T = torch_threads < 1 ? 1
               : torch_threads > CPU_NF4_MAX_THREADS ? CPU_NF4_MAX_THREADS : (size_t)torch_threads;
    float sum;
    if (n < TORCH_GRAIN || T == 1) {
        sum = torch_sum_serial(x, n);
    } else {
        // Two-pass reduction: min(T, ceil(n/GRAIN)) chunks of ceil(n/chunks), one per thread slot,
        // then the T slots (unused ones 0) summed the same way.
        float buf[CPU_NF4_MAX_THREADS];
        size_t tasks = (n + TORCH_GRAIN - 1) / TORCH_GRAIN;
        if (tasks > T) tasks = T;
        size_t cs = (n + tasks - 1) / tasks;
        for (size_t t = 0; t < T; t++) {
            size_t lo = t * cs;
            buf[t] = lo < n ? torch_sum_serial(x + lo, n - lo < cs ? n - lo : cs) : 0.0f;
        }
        sum = torch_sum_serial(buf, T);
    }
    return sum / (float)n;
}

// ---------------------------------------------------------------------------------------------
// Double quantisation (bitsandbytes quantize_blockwise / dequantize_blockwise, CPU library)

// The code of v (already scaled to [-1, 1]) via bitsandbytes' 65536-entry lookup table: v is
// binned to k = (uint16)(int)fmaf((v+1)*0.5, 65535, 0.5) and the code is the nearest one to the
// bin centre -1 + 2k/65535: the number of midpoints strictly below it (binary search).
// (bitsandbytes' build fuses the multiply-add; over every fp32 v in [-1, 1] the fused and
// unfused forms give the same bin, checked exhaustively, so the fmaf is for fidelity only.)
static unsigned dyn_index(float v, const float *mid) { // mid (255)
    float t = (v + 1.0f) * 0.5f;
    uint16_t k = (uint16_t)(int32_t)fmaf(t, 65535.0f, 0.5f);
    float c = (2.0f * (float)k) / 65535.0f - 1.0f;
    unsigned lo = 0, hi = 255;
    while (lo < hi) {
        unsigned m = (lo + hi) / 2;
        if (mid[m] < c) lo = m + 1;
        else hi = m;
    }
    return lo;
}

void cpu_nf4_quantize_absmax_mean(uint8_t *codes, float *scales, const float *absmax, float mean,
                                  size_t nblocks) {
    float mid[255];
    for (int i = 0; i < 255; i++)
        mid[i] = 0.5f * (cpu_nf4_dynamic_code[i] + cpu_nf4_dynamic_code[i + 1]);
    size_t ns = cpu_nf4_absmax_scales(nblocks);
    for (size_t b = 0; b < ns; b++) {
        size_t lo = b * CPU_NF4_DQ_BLOCK;
        size_t len = nblocks - lo < CPU_NF4_DQ_BLOCK ? nblocks - lo : CPU_NF4_DQ_BLOCK;
        float am = 0.0f;
        for (size_t i = 0; i < len; i++) {
            float a = fabsf(absmax[lo + i] - mean);
            if (a > am) am = a;
        }
        scales[b] = am;
        if (am == 0.0f) { // bitsandbytes writes code 0 (not the code of 0.0) for an all-zero block
            for (size_t i = 0; i < len; i++) codes[lo + i] = 0;
            continue;
        }
        float inv = 1.0f / am;
        for (size_t i = 0; i < len; i++) {
            float v = (absmax[lo + i] - mean) * inv;
            v = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
            codes[lo + i] = (uint8_t)dyn_index(v, mid);
        }
    }
}

void cpu_nf4_quantize_absmax(uint8_t *codes, float *scales, float *mean, const float *absmax,
                             size_t nblocks) {
    *mean = cpu_nf4_mean(absmax, nblocks, 1);
    cpu_nf4_quantize_absmax_mean(codes, scales, absmax, *mean, nblocks);
}

void cpu_nf4_dequantize_absmax(float *absmax, const uint8_t *codes, const float *scales, float mean,
                               size_t nblocks) {
    for (size_t i = 0; i < nblocks; i++) {
        float v = cpu_nf4_dynamic_code[codes[i]] * scales[i / CPU_NF4_DQ_BLOCK];
        absmax[i] = v + mean;
    }
}
