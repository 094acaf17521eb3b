/* nf4.cuh — NF4 dequantisation (QLoRA's frozen weights): two 4-bit codes a byte, the
 * high nibble first, each the index of a NormalFloat level (ftc_nf4_code, written into
 * kernels.cu from the runtime's table) times its block of 64's absmax; with double
 * quantisation the absmax is itself an 8-bit dynamic code (ftc_nf4_dynamic) times an
 * fp32 scale per 256 blocks, plus their mean. Bitwise the cpu backend's. */

/* a.p: out [n], packed u8 [n/2], then absmax f32 [n/64], or codes u8 [n/64], scales f32
 * [n/64/256], mean f32 [1]. */
FTC_INLINE void dequant(FtcArgs a, long long n, int double_quant, int dtout) {
    const unsigned char *packed = (const unsigned char *)a.p[1];
    for (long long i = ftc_gid(); i < n; i += ftc_gstride()) {
        unsigned q = i % 2 == 0 ? packed[i / 2] >> 4 : packed[i / 2] & 0xfu;
        long long blk = i / 64;
        float absmax;
        if (double_quant)
            absmax = ftc_nf4_dynamic[((const unsigned char *)a.p[2])[blk]] *
                         ((const float *)a.p[3])[blk / 256] +
                     ((const float *)a.p[4])[0];
        else
            absmax = ((const float *)a.p[2])[blk];
        stf(a.p[0], i, dtout, ftc_nf4_code[q] * absmax);
    }
}
