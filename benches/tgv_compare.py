#!/usr/bin/env python3
"""Compares Taylor-Green runs at Re = 1600 with the DNS (benches/tgv.sh).

Usage: tgv_compare.py DNS_FILE RUN_DIR... ; each RUN_DIR holds a
`taylor-green_energy.csv` and a `run.log` (the program's summary). Prints one
Markdown row per run: the peak of -dK/dt and its time against the DNS, the L2
error of the -dK/dt curve over t in [0, 20] (relative to the DNS curve's L2
norm, the run sampled at the DNS times by linear interpolation), the numerical
share of the dissipation (mean of -dK/dt - 2 nu Omega over the mean of -dK/dt
on [0, 20]), and ms per step and cell updates per second from the summary.
Standard library only.
"""
import re
import sys


def read_dns(path):
    rows = []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        t, k, rate, _ = map(float, line.split())
        rows.append((t, k, rate))
    return rows


def read_run(directory):
    rows = []
    with open(f"{directory}/taylor-green_energy.csv") as f:
        next(f)
        for line in f:
            t, k, rate, enstrophy = map(float, line.split(","))
            rows.append((t, k, rate, enstrophy))
    return rows


def interpolate(rows, t, column):
    for a, b in zip(rows, rows[1:]):
        if a[0] <= t <= b[0]:
            w = (t - a[0]) / (b[0] - a[0])
            return a[column] + w * (b[column] - a[column])
    return None


def main():
    dns = read_dns(sys.argv[1])
    peak_time, peak = max(((r[0], r[2]) for r in dns), key=lambda p: p[1])
    print("| run | peak -dK/dt | vs DNS | peak time (DNS 8.97) | L2 error of -dK/dt on [0, 20] | numerical share | ms/step | cell updates/s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for directory in sys.argv[2:]:
        run = read_run(directory)
        finite = [r for r in run if r[2] == r[2]]
        t_peak, run_peak = max(((r[0], r[2]) for r in finite), key=lambda p: p[1])
        num = den = 0.0
        for t, _, rate in dns:
            got = interpolate(finite, t, 2)
            if got is None:
                continue
            num += (got - rate) ** 2
            den += rate ** 2
        both = [r for r in finite if r[3] == r[3] and r[0] <= 20.0]
        share = sum(r[2] - r[3] for r in both) / max(sum(r[2] for r in both), 1e-300)
        log = open(f"{directory}/run.log").read()
        step = re.search(r"([0-9.]+) ms/step; ([0-9.e+]+) cell updates/s", log)
        ms, rate = (step.group(1), step.group(2)) if step else ("?", "?")
        print(f"| {directory.rstrip('/').split('/')[-1]} | {run_peak:.5f} | {100 * (run_peak / peak - 1):+.1f} % "
              f"| {t_peak:.2f} | {(num / den) ** 0.5:.3f} | {100 * share:+.2f} % | {ms} | {rate} |")


if __name__ == "__main__":
    main()
