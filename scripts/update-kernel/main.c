/* Times the kernels of kernels.c over 30 fields of 64^3 cells (one ghost
 * layer), as the solvers bench's independent-source ExprLib step does: the
 * best of ROUNDS interleaved rounds, each kernel once per field per round.
 * Prints ms per step and the graph's time over each kernel's. */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef long long (*kernel)(const double *const *, const long long *, const double *,
                            const double *, double *, long long, long long, double *, long long,
                            long long, long long, long long, long long, long long, long long,
                            long long, long long);
#define DECLARE(name)                                                                        \
    long long name(const double *const *, const long long *, const double *, const double *, \
                   double *, long long, long long, double *, long long, long long, long long, \
                   long long, long long, long long, long long, long long, long long);
DECLARE(graph)
DECLARE(solver_checked)
DECLARE(solver_unchecked)
DECLARE(solver_hoisted)
DECLARE(solver_hoisted_unchecked)
DECLARE(solver_distributed)
DECLARE(solver_uniform)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 60;
    const long long n = 64, a = n + 2, total = a * a * a;
    const int fields = 30;
    double *in[30], *out[30];
    for (int q = 0; q < fields; q++) {
        in[q] = aligned_alloc(64, total * 8 + 64);
        out[q] = aligned_alloc(64, total * 8 + 64);
        for (long long i = 0; i < total; i++) {
            in[q][i] = 0.1 * (double)(i % 17);
            out[q][i] = 0.0;
        }
    }
    kernel kernels[] = {graph, solver_checked, solver_unchecked, solver_hoisted,
                        solver_hoisted_unchecked, solver_distributed, solver_uniform};
    const char *names[] = {"graph (dt folded)", "solver before (dt a product per point)", "solver, unchecked",
                           "solver, 409.6 dt hoisted", "solver, hoisted, unchecked",
                           "solver, dt distributed, checked",
                           "solver, generated with uniform weights"};
    const int count = sizeof kernels / sizeof kernels[0];
    double best[16];
    for (int v = 0; v < count; v++) best[v] = 1e9;
    const double dt[1] = {1e-6};
    const long long strides[2] = {a, a * a};
    for (int round = 0; round < rounds; round++)
        for (int v = 0; v < count; v++) {
            const double started = now();
            for (int q = 0; q < fields; q++) {
                const double *origin[1] = {in[q] + 1 + a + a * a};
                kernels[v](origin, strides, dt, 0, out[q] + 1 + a + a * a, a, a * a, 0, 0, 0, 0,
                           0, n, 0, n, 0, n);
            }
            const double took = now() - started;
            if (took < best[v]) best[v] = took;
        }
    printf("| kernel | ms per step (30 x 64^3) | graph / kernel |\n| --- | --- | --- |\n");
    for (int v = 0; v < count; v++)
        printf("| %s | %.2f | %.3f |\n", names[v], best[v] * 1e3, best[0] / best[v]);
    return 0;
}
