/* Snapshots of the kernels Watershed generated on 2026-11-29 for one ExprLib
 * equation (independent source, Gamma = 0.1, 64^3, dt = 1e-6), and variants
 * written by hand to see where the solver's kernel loses to the graph's.
 * See scripts/bench-update-kernel.sh and docs/benchmarks.md. */
#include <math.h>
static inline unsigned long long ws_to_bits(double v) { unsigned long long u; __builtin_memcpy(&u, &v, 8); return u; }
static inline double ws_from_bits(unsigned long long u) { double v; __builtin_memcpy(&v, &u, 8); return v; }
typedef struct { double hi; double lo; } ws_pair;
typedef struct { double hi; double lo; unsigned long long quadrant; } ws_reduced;
static inline __attribute__((always_inline)) double ws_exp(double x) {
double high = x > 710.0 ? 710.0 : x;
x = x < (-746.0) ? (-746.0) : high;
double t = fma(x, 1.4426950408889634, 6755399441055744.0);
double n = t - 6755399441055744.0;
double r = fma(n, (-0.6931471803691238), x);
r = fma(n, (-1.9082149292705877e-10), r);
    double p = 2.5100515333382707e-8;
    p = fma(p, r, 2.7620257282985725e-7);
    p = fma(p, r, 2.755726818666448e-6);
    p = fma(p, r, 2.4801520940521364e-5);
    p = fma(p, r, 0.00019841269863229763);
    p = fma(p, r, 0.0013888888917442772);
    p = fma(p, r, 0.008333333333330027);
    p = fma(p, r, 0.04166666666662367);
    p = fma(p, r, 0.16666666666666669);
    p = fma(p, r, 0.5000000000000001);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
unsigned long long n_bits = ws_to_bits(t) - ws_to_bits(6755399441055744.0);
unsigned long long biased = n_bits + (x < 0.0 ? 1077ULL : 1022ULL);
double last = x < 0.0 ? 5.551115123125783e-17 : 2.0;
return (p * ws_from_bits(biased << 52)) * last;
}
static inline __attribute__((always_inline)) ws_pair ws_log_reduce(double x) {
int subnormal = x < 2.2250738585072014e-308;
double scaled = subnormal ? x * 1.8014398509481984e16 : x;
unsigned long long bits = ws_to_bits(scaled);
double biased = ws_from_bits((bits >> 52) | 0x4330000000000000ULL) - 4503599627370496.0;
double m = ws_from_bits((bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
int big = m > 1.4142135623730951;
m = big ? m * 0.5 : m;
double adjust = big ? 1.0 : 0.0;
double unscale = subnormal ? 54.0 : 0.0;
ws_pair out;
out.hi = biased - 1023.0 + adjust - unscale;
out.lo = m;
return out;
}
static inline __attribute__((always_inline)) double ws_log(double x) {
ws_pair km = ws_log_reduce(x);
double k = km.hi;
double f = km.lo - 1.0;
double s = f / (2.0 + f);
double z = s * s;
    double p = 0.09523809523809523;
    p = p * z + 0.10526315789473684;
    p = p * z + 0.11764705882352941;
    p = p * z + 0.13333333333333333;
    p = p * z + 0.15384615384615385;
    p = p * z + 0.18181818181818182;
    p = p * z + 0.2222222222222222;
    p = p * z + 0.2857142857142857;
    p = p * z + 0.4;
    p = p * z + 0.6666666666666666;
double r = p * z;
double hfsq = 0.5 * f * f;
double value = k * 0.6931471803691238 - ((hfsq - (s * (hfsq + r) + k * 1.9082149292705877e-10)) - f);
return x > 0.0 ? (x == ws_from_bits(0x7ff0000000000000ULL) ? ws_from_bits(0x7ff0000000000000ULL) : value) : (x == 0.0 ? ws_from_bits(0xfff0000000000000ULL) : ws_from_bits(0x7ff8000000000000ULL));
}
static inline __attribute__((always_inline)) ws_pair ws_two_sum(double a, double b) {
ws_pair out;
out.hi = a + b;
double bb = out.hi - a;
out.lo = (a - (out.hi - bb)) + (b - bb);
return out;
}
static inline __attribute__((always_inline)) ws_pair ws_fast_two_sum(double a, double b) {
ws_pair out;
out.hi = a + b;
out.lo = b - (out.hi - a);
return out;
}
static inline __attribute__((always_inline)) ws_pair ws_two_product(double a, double b) {
ws_pair out;
out.hi = a * b;
double ca = 134217729.0 * a;
double a_hi = ca - (ca - a);
double a_lo = a - a_hi;
double cb = 134217729.0 * b;
double b_hi = cb - (cb - b);
double b_lo = b - b_hi;
out.lo = ((a_hi * b_hi - out.hi) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo;
return out;
}
static inline __attribute__((always_inline)) ws_reduced ws_reduce_half_pi(double x) {
double t = x * 0.6366197723675814 + 6755399441055744.0;
double n = t - 6755399441055744.0;
ws_reduced out;
out.quadrant = ws_to_bits(t) & 3ULL;
double a = x - n * 1.5707963109016418;
ws_pair h1 = ws_two_sum(a, -(n * 1.5893254712295857e-8));
ws_pair h2 = ws_two_sum(h1.hi, -(n * 6.123233932053594e-17));
double lo = h1.lo + h2.lo - n * 6.368317055225283e-25 - n * 1.082856673921914e-32;
ws_pair r = ws_fast_two_sum(h2.hi, lo);
out.hi = r.hi;
out.lo = r.lo;
return out;
}
static inline __attribute__((always_inline)) ws_pair ws_sin_cos_reduced(double r_hi, double r_lo) {
double z = r_hi * r_hi;
    double ps = 8.22063524662433e-18;
    ps = ps * z + (-2.8114572543455206e-15);
    ps = ps * z + 7.647163731819816e-13;
    ps = ps * z + (-1.6059043836821613e-10);
    ps = ps * z + 2.505210838544172e-8;
    ps = ps * z + (-2.7557319223985893e-6);
    ps = ps * z + 0.0001984126984126984;
    ps = ps * z + (-0.008333333333333333);
    ps = ps * z + 0.16666666666666666;
    double pc = 4.110317623312165e-19;
    pc = pc * z + (-1.5619206968586225e-16);
    pc = pc * z + 4.779477332387385e-14;
    pc = pc * z + (-1.1470745597729725e-11);
    pc = pc * z + 2.08767569878681e-9;
    pc = pc * z + (-2.755731922398589e-7);
    pc = pc * z + 2.48015873015873e-5;
    pc = pc * z + (-0.001388888888888889);
    pc = pc * z + 0.041666666666666664;
ws_pair out;
out.hi = r_hi - (r_hi * (z * ps) - r_lo * (1.0 - 0.5 * z));
double hz = 0.5 * z;
double w = 1.0 - hz;
out.lo = w + (((1.0 - w) - hz) + (z * z * pc - r_hi * r_lo));
return out;
}
static inline __attribute__((always_inline)) double ws_by_quadrant(unsigned long long q, double sin_r, double cos_r) {
double v = (q & 1ULL) == 1ULL ? cos_r : sin_r;
return (q & 2ULL) == 2ULL ? -v : v;
}
static inline __attribute__((always_inline)) double ws_sin(double x) {
ws_reduced r = ws_reduce_half_pi(x);
ws_pair sc = ws_sin_cos_reduced(r.hi, r.lo);
double value = ws_by_quadrant(r.quadrant, sc.hi, sc.lo);
double a = fabs(x);
return a < 7.450580596923828e-9 ? x : (a <= 210000000.0 ? value : ws_from_bits(0x7ff8000000000000ULL));
}
static inline __attribute__((always_inline)) double ws_cos(double x) {
ws_reduced r = ws_reduce_half_pi(x);
ws_pair sc = ws_sin_cos_reduced(r.hi, r.lo);
double value = ws_by_quadrant(r.quadrant + 1ULL, sc.hi, sc.lo);
return fabs(x) <= 210000000.0 ? value : ws_from_bits(0x7ff8000000000000ULL);
}
static inline __attribute__((always_inline)) double ws_tanh(double x) {
double z = x * x;
    double p = (-2.859136662305254e-8);
    p = p * z + 7.054636946400968e-8;
    p = p * z + (-1.7406618963571648e-7);
    p = p * z + 4.294911078273806e-7;
    p = p * z + (-1.0597268320104654e-6);
    p = p * z + 2.6147711512907546e-6;
    p = p * z + (-6.451689215655431e-6);
    p = p * z + 1.5918905069328964e-5;
    p = p * z + (-3.927832388331683e-5);
    p = p * z + 9.691537956929451e-5;
    p = p * z + (-0.00023912911424355248);
    p = p * z + 0.000590027440945586;
    p = p * z + (-0.0014558343870513183);
    p = p * z + 0.003592128036572481;
    p = p * z + (-0.008863235529902197);
    p = p * z + 0.021869488536155203;
    p = p * z + (-0.05396825396825397);
    p = p * z + 0.13333333333333333;
    p = p * z + (-0.3333333333333333);
double series = x + x * (z * p);
double a = fabs(x);
double e = ws_exp(2.0 * a);
double large = 1.0 - 2.0 / (e + 1.0);
large = copysign(large, x);
return a < 7.450580596923828e-9 ? x : (a < 0.55 ? series : large);
}
static inline __attribute__((always_inline)) ws_pair ws_log_double_double(double a) {
ws_pair km = ws_log_reduce(a);
double k = km.hi;
double m = km.lo;
double numerator = m - 1.0;
ws_pair d = ws_two_sum(m, 1.0);
double u_hi = numerator / d.hi;
ws_pair p = ws_two_product(u_hi, d.hi);
double u_lo = (((numerator - p.hi) - p.lo) - u_hi * d.lo) / d.hi;
ws_pair zz = ws_two_product(u_hi, u_hi);
double z = zz.hi;
ws_pair cube = ws_two_product(z, u_hi);
double cube_lo = cube.lo + zz.lo * u_hi;
ws_pair third = ws_two_product(cube.hi, 0.6666666666666666);
double third_lo = third.lo + (cube_lo * 0.6666666666666666 + cube.hi * 3.700743415417188e-17);
    double q = 0.047619047619047616;
    q = q * z + 0.05263157894736842;
    q = q * z + 0.058823529411764705;
    q = q * z + 0.06666666666666667;
    q = q * z + 0.07692307692307693;
    q = q * z + 0.09090909090909091;
    q = q * z + 0.1111111111111111;
    q = q * z + 0.14285714285714285;
    q = q * z + 0.2;
double rest = 2.0 * cube.hi * (z * q) + 2.0 * z * u_lo;
ws_pair s1 = ws_two_sum(k * 0.6931471803691238, 2.0 * u_hi);
ws_pair h = ws_two_sum(s1.hi, third.hi);
double lo = (s1.lo + h.lo) + (k * 1.9082149292705877e-10 + (2.0 * u_lo + (third_lo + rest)));
return ws_fast_two_sum(h.hi, lo);
}
static inline __attribute__((always_inline)) double ws_pow(double x, double y) {
double ax = fabs(x);
double ay = fabs(y);
ws_pair l = ws_log_double_double(ax);
double hi = ax == 0.0 ? ws_from_bits(0xfff0000000000000ULL) : (ax == ws_from_bits(0x7ff0000000000000ULL) ? ws_from_bits(0x7ff0000000000000ULL) : (ax != ax ? ws_from_bits(0x7ff8000000000000ULL) : l.hi));
double lo = ax == 0.0 ? 0.0 : (ax == ws_from_bits(0x7ff0000000000000ULL) ? 0.0 : (ax != ax ? 0.0 : l.lo));
ws_pair t0 = ws_two_product(y, hi);
double tl = t0.lo + y * lo;
ws_pair t_sum = ws_fast_two_sum(t0.hi, tl);
double t = fabs(tl) < 1.0 ? t_sum.hi : t0.hi;
t = fabs(t0.hi) < 1000.0 ? t : t0.hi;
double t_lo = fabs(tl) < 1.0 ? t_sum.lo : 0.0;
t_lo = fabs(t0.hi) < 1000.0 ? t_lo : 0.0;
double e = ws_exp(t);
double magnitude = e == ws_from_bits(0x7ff0000000000000ULL) ? e : e + e * t_lo;
double y_integer = (ay + 4503599627370496.0) - 4503599627370496.0 == ay ? 1.0 : 0.0;
y_integer = ay >= 4503599627370496.0 ? 1.0 : y_integer;
unsigned long long parity_bits = ay < 4503599627370496.0 ? ws_to_bits(ay + 4503599627370496.0) : ws_to_bits(ay);
double parity = (parity_bits & 1ULL) == 1ULL ? 1.0 : 0.0;
double y_odd = ay < 9007199254740992.0 ? y_integer * parity : 0.0;
double negated = y_odd != 0.0 ? -magnitude : magnitude;
double signed_value = (ws_to_bits(x) >> 63) == 1ULL ? negated : magnitude;
double r = y_integer == 0.0 ? ws_from_bits(0x7ff8000000000000ULL) : signed_value;
r = x < 0.0 ? r : signed_value;
r = x > ws_from_bits(0xfff0000000000000ULL) ? r : signed_value;
double at_one = ay == ws_from_bits(0x7ff0000000000000ULL) ? 1.0 : r;
r = ax == 1.0 ? at_one : r;
r = x == 1.0 ? 1.0 : r;
return y == 0.0 ? 1.0 : r;
}
static inline __attribute__((always_inline)) double ws_select(double c, double a, double b) { return c != 0.0 ? a : b; }
static inline __attribute__((always_inline)) double ws_min(double a, double b) { return a < b ? a : b; }
static inline __attribute__((always_inline)) double ws_max(double a, double b) { return a > b ? a : b; }
static inline __attribute__((always_inline)) double ws_minmod(double r) { return fmax(fmin(r, 1.0), 0.0); }
static inline __attribute__((always_inline)) double ws_vanleer(double r) { return (r + fabs(r)) / (1.0 + fabs(r)); }
static inline __attribute__((always_inline)) double ws_superbee(double r) { return fmax(fmax(fmin(2.0 * r, 1.0), fmin(r, 2.0)), 0.0); }
static inline __attribute__((always_inline)) double ws_face_ws_minmod(double uu, double u, double d) {
double jump = d - u;
double r = (u - uu) / jump;
double value = u + 0.5 * ws_minmod(r) * jump;
return jump == 0.0 ? u : value;
}
static inline __attribute__((always_inline)) double ws_limited_ws_minmod(double v, double m2, double m1, double p0, double p1) {
double up = ws_face_ws_minmod(m2, m1, p0);
double down = ws_face_ws_minmod(p1, p0, m1);
return v >= 0.0 ? up : down;
}
static inline __attribute__((always_inline)) double ws_face_ws_vanleer(double uu, double u, double d) {
double jump = d - u;
double r = (u - uu) / jump;
double value = u + 0.5 * ws_vanleer(r) * jump;
return jump == 0.0 ? u : value;
}
static inline __attribute__((always_inline)) double ws_limited_ws_vanleer(double v, double m2, double m1, double p0, double p1) {
double up = ws_face_ws_vanleer(m2, m1, p0);
double down = ws_face_ws_vanleer(p1, p0, m1);
return v >= 0.0 ? up : down;
}
static inline __attribute__((always_inline)) double ws_face_ws_superbee(double uu, double u, double d) {
double jump = d - u;
double r = (u - uu) / jump;
double value = u + 0.5 * ws_superbee(r) * jump;
return jump == 0.0 ? u : value;
}
static inline __attribute__((always_inline)) double ws_limited_ws_superbee(double v, double m2, double m1, double p0, double p1) {
double up = ws_face_ws_superbee(m2, m1, p0);
double down = ws_face_ws_superbee(p1, p0, m1);
return v >= 0.0 ? up : down;
}


/* The hand-built graph's update, as generated: dt is a literal, so the
 * lowering folds it into the weights (phi (1 - 6 c) + c sum + c e exp). */
long long graph(const double *const *f, const long long *fs, const double *p, const double *g,
    double *t, long long tsy, long long tsz, double *s, long long width, long long rowcap,
    long long halo, long long x0, long long x1, long long j0, long long rows, long long k0,
    long long planes)
{
    (void)g; (void)p; (void)fs; (void)s; (void)t; (void)tsy; (void)tsz;
    const long long rl = width * rowcap;
    (void)rl; (void)halo;
    unsigned long long bad = 0;
    for (long long k = k0; k < k0 + planes; ++k)
    for (long long r = 0; r < rows; ++r) {
        const long long j = j0 + r;
        const double *F0_m1_0 = f[0] + (j + -1LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_m1 = f[0] + (j + 0LL) * fs[0] + (k + -1LL) * fs[1];
        const double *F0_0_0 = f[0] + (j + 0LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_1 = f[0] + (j + 0LL) * fs[0] + (k + 1LL) * fs[1];
        const double *F0_1_0 = f[0] + (j + 1LL) * fs[0] + (k + 0LL) * fs[1];
        double *T = t + j * tsy + k * tsz; (void)T;
#pragma GCC ivdep
        for (long long x = x0 + 0LL; x < x1 + 0LL; ++x) {
            const double r0 = ws_exp(F0_0_0[x + 0LL]);
            const double v = 0.9975424 * F0_0_0[x + 0LL] + 0.0004096 * (((F0_0_0[x + -1LL] + F0_0_0[x + 1LL]) + (F0_m1_0[x + 0LL] + F0_1_0[x + 0LL])) + (F0_0_m1[x + 0LL] + F0_0_1[x + 0LL])) + 1e-6 * r0;
            T[x] = v;
        }
    }
    return bad != 0;
}

/* TransportSolver's update, as generated: dt is a run-time parameter
 * (p0) and every written value is tested for finiteness. */
long long solver_checked(const double *const *f, const long long *fs, const double *p, const double *g,
    double *t, long long tsy, long long tsz, double *s, long long width, long long rowcap,
    long long halo, long long x0, long long x1, long long j0, long long rows, long long k0,
    long long planes)
{
    (void)g; (void)p; (void)fs; (void)s; (void)t; (void)tsy; (void)tsz;
    const double p0 = p[0];
    const long long rl = width * rowcap;
    (void)rl; (void)halo;
    unsigned long long bad = 0;
    for (long long k = k0; k < k0 + planes; ++k)
    for (long long r = 0; r < rows; ++r) {
        const long long j = j0 + r;
        const double *F0_m1_0 = f[0] + (j + -1LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_m1 = f[0] + (j + 0LL) * fs[0] + (k + -1LL) * fs[1];
        const double *F0_0_0 = f[0] + (j + 0LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_1 = f[0] + (j + 0LL) * fs[0] + (k + 1LL) * fs[1];
        const double *F0_1_0 = f[0] + (j + 1LL) * fs[0] + (k + 0LL) * fs[1];
        double *T = t + j * tsy + k * tsz; (void)T;
#pragma GCC ivdep
        for (long long x = x0 + 0LL; x < x1 + 0LL; ++x) {
            const double r0 = p0;
            const double r1 = ws_exp(F0_0_0[x + 0LL]);
            const double r2 = 1.0 * (((F0_0_0[x + -1LL] + F0_0_0[x + 1LL]) + (F0_m1_0[x + 0LL] + F0_1_0[x + 0LL])) + (F0_0_m1[x + 0LL] + F0_0_1[x + 0LL])) + (-6.000000000000001) * F0_0_0[x + 0LL] + 0.00244140625 * r1;
            const double v = 1.0 * F0_0_0[x + 0LL] + 409.6 * (r0 * r2);
            T[x] = v;
            bad |= ws_to_bits(v - v);
        }
    }
    return bad != 0;
}

/* The same without the finiteness test. */
long long solver_unchecked(const double *const *f, const long long *fs, const double *p, const double *g,
    double *t, long long tsy, long long tsz, double *s, long long width, long long rowcap,
    long long halo, long long x0, long long x1, long long j0, long long rows, long long k0,
    long long planes)
{
    (void)g; (void)p; (void)fs; (void)s; (void)t; (void)tsy; (void)tsz;
    const double p0 = p[0];
    const long long rl = width * rowcap;
    (void)rl; (void)halo;
    unsigned long long bad = 0;
    for (long long k = k0; k < k0 + planes; ++k)
    for (long long r = 0; r < rows; ++r) {
        const long long j = j0 + r;
        const double *F0_m1_0 = f[0] + (j + -1LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_m1 = f[0] + (j + 0LL) * fs[0] + (k + -1LL) * fs[1];
        const double *F0_0_0 = f[0] + (j + 0LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_1 = f[0] + (j + 0LL) * fs[0] + (k + 1LL) * fs[1];
        const double *F0_1_0 = f[0] + (j + 1LL) * fs[0] + (k + 0LL) * fs[1];
        double *T = t + j * tsy + k * tsz; (void)T;
#pragma GCC ivdep
        for (long long x = x0 + 0LL; x < x1 + 0LL; ++x) {
            const double r0 = p0;
            const double r1 = ws_exp(F0_0_0[x + 0LL]);
            const double r2 = 1.0 * (((F0_0_0[x + -1LL] + F0_0_0[x + 1LL]) + (F0_m1_0[x + 0LL] + F0_1_0[x + 0LL])) + (F0_0_m1[x + 0LL] + F0_0_1[x + 0LL])) + (-6.000000000000001) * F0_0_0[x + 0LL] + 0.00244140625 * r1;
            const double v = 1.0 * F0_0_0[x + 0LL] + 409.6 * (r0 * r2);
            T[x] = v;
        }
    }
    return bad != 0;
}

/* The solver's, with 409.6 * p0 formed once per call (one multiply less
 * per point). */
long long solver_hoisted(const double *const *f, const long long *fs, const double *p, const double *g,
    double *t, long long tsy, long long tsz, double *s, long long width, long long rowcap,
    long long halo, long long x0, long long x1, long long j0, long long rows, long long k0,
    long long planes)
{
    (void)g; (void)p; (void)fs; (void)s; (void)t; (void)tsy; (void)tsz;
    const double p0 = p[0];
    const long long rl = width * rowcap;
    (void)rl; (void)halo;
    unsigned long long bad = 0;
    for (long long k = k0; k < k0 + planes; ++k)
    for (long long r = 0; r < rows; ++r) {
        const long long j = j0 + r;
        const double *F0_m1_0 = f[0] + (j + -1LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_m1 = f[0] + (j + 0LL) * fs[0] + (k + -1LL) * fs[1];
        const double *F0_0_0 = f[0] + (j + 0LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_1 = f[0] + (j + 0LL) * fs[0] + (k + 1LL) * fs[1];
        const double *F0_1_0 = f[0] + (j + 1LL) * fs[0] + (k + 0LL) * fs[1];
        double *T = t + j * tsy + k * tsz; (void)T;
#pragma GCC ivdep
        for (long long x = x0 + 0LL; x < x1 + 0LL; ++x) {
            const double r0 = p0;
            const double r1 = ws_exp(F0_0_0[x + 0LL]);
            const double r2 = 1.0 * (((F0_0_0[x + -1LL] + F0_0_0[x + 1LL]) + (F0_m1_0[x + 0LL] + F0_1_0[x + 0LL])) + (F0_0_m1[x + 0LL] + F0_0_1[x + 0LL])) + (-6.000000000000001) * F0_0_0[x + 0LL] + 0.00244140625 * r1;
            const double v = 1.0 * F0_0_0[x + 0LL] + (409.6 * r0) * r2;
            T[x] = v;
            bad |= ws_to_bits(v - v);
        }
    }
    return bad != 0;
}

/* That, without the finiteness test. */
long long solver_hoisted_unchecked(const double *const *f, const long long *fs, const double *p, const double *g,
    double *t, long long tsy, long long tsz, double *s, long long width, long long rowcap,
    long long halo, long long x0, long long x1, long long j0, long long rows, long long k0,
    long long planes)
{
    (void)g; (void)p; (void)fs; (void)s; (void)t; (void)tsy; (void)tsz;
    const double p0 = p[0];
    const long long rl = width * rowcap;
    (void)rl; (void)halo;
    unsigned long long bad = 0;
    for (long long k = k0; k < k0 + planes; ++k)
    for (long long r = 0; r < rows; ++r) {
        const long long j = j0 + r;
        const double *F0_m1_0 = f[0] + (j + -1LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_m1 = f[0] + (j + 0LL) * fs[0] + (k + -1LL) * fs[1];
        const double *F0_0_0 = f[0] + (j + 0LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_1 = f[0] + (j + 0LL) * fs[0] + (k + 1LL) * fs[1];
        const double *F0_1_0 = f[0] + (j + 1LL) * fs[0] + (k + 0LL) * fs[1];
        double *T = t + j * tsy + k * tsz; (void)T;
#pragma GCC ivdep
        for (long long x = x0 + 0LL; x < x1 + 0LL; ++x) {
            const double r0 = p0;
            const double r1 = ws_exp(F0_0_0[x + 0LL]);
            const double r2 = 1.0 * (((F0_0_0[x + -1LL] + F0_0_0[x + 1LL]) + (F0_m1_0[x + 0LL] + F0_1_0[x + 0LL])) + (F0_0_m1[x + 0LL] + F0_0_1[x + 0LL])) + (-6.000000000000001) * F0_0_0[x + 0LL] + 0.00244140625 * r1;
            const double v = 1.0 * F0_0_0[x + 0LL] + (409.6 * r0) * r2;
            T[x] = v;
        }
    }
    return bad != 0;
}

/* The solver's with dt distributed over the weights once per call, as the
 * graph's literal dt is, and the finiteness test kept. */
long long solver_distributed(const double *const *f, const long long *fs, const double *p, const double *g,
    double *t, long long tsy, long long tsz, double *s, long long width, long long rowcap,
    long long halo, long long x0, long long x1, long long j0, long long rows, long long k0,
    long long planes)
{
    (void)g; (void)p; (void)fs; (void)s; (void)t; (void)tsy; (void)tsz;
    const double p0 = p[0];
    const double c1 = 409.6 * p0; const double c0 = 1.0 + c1 * (-6.000000000000001); const double c2 = c1 * 0.00244140625;
    const long long rl = width * rowcap;
    (void)rl; (void)halo;
    unsigned long long bad = 0;
    for (long long k = k0; k < k0 + planes; ++k)
    for (long long r = 0; r < rows; ++r) {
        const long long j = j0 + r;
        const double *F0_m1_0 = f[0] + (j + -1LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_m1 = f[0] + (j + 0LL) * fs[0] + (k + -1LL) * fs[1];
        const double *F0_0_0 = f[0] + (j + 0LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_1 = f[0] + (j + 0LL) * fs[0] + (k + 1LL) * fs[1];
        const double *F0_1_0 = f[0] + (j + 1LL) * fs[0] + (k + 0LL) * fs[1];
        double *T = t + j * tsy + k * tsz; (void)T;
#pragma GCC ivdep
        for (long long x = x0 + 0LL; x < x1 + 0LL; ++x) {
            const double r1 = ws_exp(F0_0_0[x + 0LL]);
            const double v = c0 * F0_0_0[x + 0LL] + c1 * (((F0_0_0[x + -1LL] + F0_0_0[x + 1LL]) + (F0_m1_0[x + 0LL] + F0_1_0[x + 0LL])) + (F0_0_m1[x + 0LL] + F0_0_1[x + 0LL])) + c2 * r1;
            T[x] = v;
            bad |= ws_to_bits(v - v);
        }
    }
    return bad != 0;
}

/* TransportSolver's update as generated after weights became uniform values
 * (2026-11-29, thirty-fourth session): dt scales the form's weights once
 * per call (uv0..uv3), the finiteness test kept. */
long long solver_uniform(const double *const *f, const long long *fs, const double *p, const double *g,
    double *t, long long tsy, long long tsz, double *s, long long width, long long rowcap,
    long long halo, long long x0, long long x1, long long j0, long long rows, long long k0,
    long long planes)
{
    (void)g; (void)p; (void)fs; (void)s; (void)t; (void)tsy; (void)tsz;
    const double p0 = p[0];
    const double uv0 = p0; (void)uv0;
    const double uv1 = 409.6 * uv0; (void)uv1;
    const double uv2 = (-2457.6000000000004) * uv0; (void)uv2;
    const double uv3 = 1.0 + uv2; (void)uv3;
    const long long rl = width * rowcap;
    (void)rl; (void)halo;
    unsigned long long bad = 0;
    for (long long k = k0; k < k0 + planes; ++k)
    for (long long r = 0; r < rows; ++r) {
        const long long j = j0 + r;
        const double *F0_m1_0 = f[0] + (j + -1LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_m1 = f[0] + (j + 0LL) * fs[0] + (k + -1LL) * fs[1];
        const double *F0_0_0 = f[0] + (j + 0LL) * fs[0] + (k + 0LL) * fs[1];
        const double *F0_0_1 = f[0] + (j + 0LL) * fs[0] + (k + 1LL) * fs[1];
        const double *F0_1_0 = f[0] + (j + 1LL) * fs[0] + (k + 0LL) * fs[1];
        double *T = t + j * tsy + k * tsz; (void)T;
#pragma GCC ivdep
        for (long long x = x0 + 0LL; x < x1 + 0LL; ++x) {
            const double r0 = ws_exp(F0_0_0[x + 0LL]);
            const double v = uv3 * F0_0_0[x + 0LL] + uv1 * (((F0_0_0[x + -1LL] + F0_0_0[x + 1LL]) + (F0_m1_0[x + 0LL] + F0_1_0[x + 0LL])) + (F0_0_m1[x + 0LL] + F0_0_1[x + 0LL])) + uv0 * r0;
            T[x] = v;
            bad |= ws_to_bits(v - v);
        }
    }
    return bad != 0;
}
