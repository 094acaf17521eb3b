/* fmath.h — exp, tanh and erf in fp32, the same bits on every backend.
 *
 * The elementwise kernels (silu, gelu, tanh, the soft cap, exp) promise the cpu backend's
 * bits on a GPU. The C library's expf and CUDA's differ in the last place on some inputs
 * (glibc's is nearly correctly rounded, CUDA's within 2 ulp), so both sides call these
 * instead: range reduction and polynomials in plain fp32 additions, multiplications and
 * divisions, which round the same everywhere when nothing contracts a*b+c (the cpu backend
 * builds as ISO C, the emu with -ffp-contract=off, NVRTC with --fmad=false). Measured
 * against double-precision libm over every 61st float of their working ranges: expf
 * within 1.03 ulp, tanhf 1.46, erff 3.73 (tests/test_runtime.c's test_fmath checks 2, 2,
 * 4). The attention and loss kernels, which are compared with a tolerance, keep the
 * hardware's exp2f.
 *
 * The includer provides FTC_INLINE and the bit cast ftc_u2f (codegen/cuda/prelude.cuh on a
 * GPU and under the emu; runtime/cpu/kernels.c on the cpu backend), and
 * <math.h>'s rintf, fabsf and copysignf. */

/* e^x: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, the first with its low 12 bits
 * zero, so that n ln2_hi is exact), e^r by its Taylor polynomial to r^7 (the rest below
 * 0.12 ulp), then 2^n in the exponent bits, in two factors where 2^n itself is not a normal
 * float. */
FTC_INLINE float ftc_expf(float x) {
    if (x != x)
        return x + x;
    if (x > 88.7228317f)   /* 0x1.62e42ep+6, the last x whose e^x is finite in fp32 */
        return ftc_u2f(0x7f800000u);
    if (x < -110.0f)
        return 0.0f;
    float n = rintf(x * 1.44269504088896341f);
    float r = (x - n * 0.693145751953125f) - n * 1.42860676533018704e-6f;
    float c = 0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 +
                                                                          r * (1.0f / 5040)))));
    float p = 1.0f + (r + r * r * c);
    int k = (int)n;
    if (k > 127)
        return p * ftc_u2f(254u << 23) * 2.0f;
    if (k < -125)
        return p * ftc_u2f((unsigned int)(k + 100 + 127) << 23) * ftc_u2f(27u << 23);   /* 2^-100 */
    return p * ftc_u2f((unsigned int)(k + 127) << 23);
}

/* tanh x: its Taylor series in x^2 below 0.55 (terms to x^17, the rest below 0.1 ulp); else
 * 1 - 2 / (e^2|x| + 1), which is 1 in fp32 from 9.1 on. Odd. */
FTC_INLINE float ftc_tanhf(float x) {
    float a = fabsf(x), t;
    if (a != a)
        return x + x;
    if (a >= 9.1f) {
        t = 1.0f;
    } else if (a < 0.55f) {
        float z = a * a;
        t = a + a * z *
                    (-1.0f / 3 +
                     z * (2.0f / 15 +
                          z * (-17.0f / 315 +
                               z * (62.0f / 2835 +
                                    z * (-1382.0f / 155925 +
                                         z * (21844.0f / 6081075 +
                                              z * (-929569.0f / 638512875 + z * (6404582.0f / 10854718875.0f))))))));
    } else {
        t = 1.0f - 2.0f / (ftc_expf(2.0f * a) + 1.0f);
    }
    return copysignf(t, x);
}

/* erf x: below 0.5 its Taylor series (2/sqrt pi) sum (-1)^n x^(2n+1) / (n! (2n+1)), to n = 7;
 * from 0.5 on 1 - erfc x, erfc by the Chebyshev fit of Press et al. (Numerical Recipes,
 * erfcc: relative error below 1.2e-7), whose cancellation past 0.5 is at most one bit. Odd;
 * 1 from 4 on. */
FTC_INLINE float ftc_erff(float x) {
    float a = fabsf(x), e;
    if (a != a)
        return x + x;
    if (a >= 4.0f) {
        e = 1.0f;
    } else if (a < 0.5f) {
        float z = a * a;
        e = 1.12837916709551257f * a *
            (1.0f + z * (-1.0f / 3 + z * (1.0f / 10 + z * (-1.0f / 42 + z * (1.0f / 216 +
                    z * (-1.0f / 1320 + z * (1.0f / 9360 + z * (-1.0f / 75600))))))));
    } else {
        float t = 1.0f / (1.0f + 0.5f * a);
        float y = -a * a - 1.26551223f +
                  t * (1.00002368f +
                       t * (0.37409196f +
                            t * (0.09678418f +
                                 t * (-0.18628806f +
                                      t * (0.27886807f +
                                           t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
        e = 1.0f - t * ftc_expf(y);
    }
    return copysignf(e, x);
}
