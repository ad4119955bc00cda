// A hand-written ceiling for the ExprLib diffusion (docs/benchmarks.md):
// 30 fields in and 30 out at n^3 with one ghost layer, the footprint of the
// ExprLib test, on one thread. copy: out = in, row by row, equation inside
// the row loop. The update out = in + c * 7-point Laplacian three ways:
// equation inside the row loop ("lap", what horizontal fusion with one-row
// strips would do), equation outermost (what separate graph nodes do), and
// bands of 8 planes with the equation inside the band.
// Run: gcc -O3 -march=native -std=c11 benches/exprlib_ceiling.c -o /tmp/ceiling && /tmp/ceiling 64
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define E 30
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+1e-9*t.tv_nsec;}
int main(int argc, char **argv){
  const long n = argc > 1 ? atol(argv[1]) : 64, m = n + 2, len = m*m*m;
  double *in[E], *out[E];
  for (int e=0;e<E;e++){ in[e]=aligned_alloc(64,len*8); out[e]=aligned_alloc(64,len*8); for(long i=0;i<len;i++){in[e][i]=1e-3*(i%97)+e; out[e][i]=0;} }
  double best_copy=1e9, best_lap=1e9, best_eq=1e9, best_band=1e9;
  for (int rep=0; rep<15; rep++){
    double t0=now();
    for (long k=1;k<=n;k++) for (long j=1;j<=n;j++) for (int e=0;e<E;e++){
      const double *restrict a = in[e] + j*m + k*m*m; double *restrict o = out[e] + j*m + k*m*m;
      for (long i=1;i<=n;i++) o[i] = a[i];
    }
    double t1=now();
    for (long k=1;k<=n;k++) for (long j=1;j<=n;j++) for (int e=0;e<E;e++){
      const double *restrict a = in[e] + j*m + k*m*m; double *restrict o = out[e] + j*m + k*m*m;
      for (long i=1;i<=n;i++) o[i] = a[i] + 1e-7*(a[i-1]+a[i+1]+a[i-m]+a[i+m]+a[i-m*m]+a[i+m*m]-6.0*a[i]);
    }
    double t2=now();
    for (int e=0;e<E;e++) for (long k=1;k<=n;k++) for (long j=1;j<=n;j++){
      const double *restrict a = in[e] + j*m + k*m*m; double *restrict o = out[e] + j*m + k*m*m;
      for (long i=1;i<=n;i++) o[i] = a[i] + 1e-7*(a[i-1]+a[i+1]+a[i-m]+a[i+m]+a[i-m*m]+a[i+m*m]-6.0*a[i]);
    }
    double t3=now();
    for (long kb=1;kb<=n;kb+=8) for (int e=0;e<E;e++) for (long k=kb;k<kb+8 && k<=n;k++) for (long j=1;j<=n;j++){
      const double *restrict a = in[e] + j*m + k*m*m; double *restrict o = out[e] + j*m + k*m*m;
      for (long i=1;i<=n;i++) o[i] = a[i] + 1e-7*(a[i-1]+a[i+1]+a[i-m]+a[i+m]+a[i-m*m]+a[i+m*m]-6.0*a[i]);
    }
    double t4=now();
    if (t3-t2<best_eq) best_eq=t3-t2;
    if (t4-t3<best_band) best_band=t4-t3;
    if (t1-t0<best_copy) best_copy=t1-t0;
    if (t2-t1<best_lap) best_lap=t2-t1;
  }
  double pts = (double)E*n*n*n/1e6;
  printf("n=%ld copy %.2f ms %.0f Mpts/s (%.1f GB/s at 16 B)  lap %.2f ms %.0f Mpts/s\n", n, best_copy*1e3, pts/best_copy, pts/best_copy*16/1e3, best_lap*1e3, pts/best_lap);
  printf("   equation-outer %.0f Mpts/s, 8-plane bands equation-inner %.0f Mpts/s\n", pts/best_eq, pts/best_band);
  return (int)out[3][m*m+m+5] & 0;
}
