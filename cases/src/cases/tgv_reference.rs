//! The reference solution of the 3D Taylor-Green vortex at Re = 1600: the
//! 512^3 pseudo-spectral DNS of the HiOCFD workshop (case C3.5), shipped in
//! `cases/data/tgv-re1600/` with its provenance note. Columns: time,
//! kinetic energy K, dissipation rate -dK/dt, enstrophy; t = 0 .. 19.99
//! every 0.01.

/// One row of the DNS.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DnsRow {
    /// Time (in units of L / V0).
    pub time: f64,
    /// Kinetic energy, volume average of |u|^2 / 2.
    pub kinetic_energy: f64,
    /// Dissipation rate -dK/dt.
    pub dissipation_rate: f64,
    /// Enstrophy, volume average of |omega|^2 / 2.
    pub enstrophy: f64,
}

/// The Reynolds number of the reference.
pub const REYNOLDS: f64 = 1600.0;

/// The DNS rows, parsed from the shipped file (comment lines skipped).
pub fn dns() -> Vec<DnsRow> {
    include_str!("../../data/tgv-re1600/spectral_Re1600_512.gdiag")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let v: Vec<f64> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() == 4).then(|| DnsRow {
                time: v[0],
                kinetic_energy: v[1],
                dissipation_rate: v[2],
                enstrophy: v[3],
            })
        })
        .collect()
}

/// The DNS peak of -dK/dt: (time, value).
pub fn dns_peak() -> (f64, f64) {
    dns().iter().fold((f64::NAN, f64::NEG_INFINITY), |best, r| {
        if r.dissipation_rate > best.1 {
            (r.time, r.dissipation_rate)
        } else {
            best
        }
    })
}

/// The DNS dissipation rate at `time`, linearly interpolated (`None`
/// outside the table).
pub fn dns_rate_at(rows: &[DnsRow], time: f64) -> Option<f64> {
    let upper = rows.iter().position(|r| r.time >= time)?;
    if upper == 0 {
        return (rows[0].time == time).then_some(rows[0].dissipation_rate);
    }
    let (a, b) = (rows[upper - 1], rows[upper]);
    let w = (time - a.time) / (b.time - a.time);
    Some(a.dissipation_rate + w * (b.dissipation_rate - a.dissipation_rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures the provenance note states: 2000 rows, K(0) = 0.125,
    /// -dK/dt(0) = 3 / (4 Re), the peak 0.012858 at t = 8.97.
    #[test]
    fn the_shipped_table_is_the_documented_one() {
        let rows = dns();
        assert_eq!(rows.len(), 2000);
        assert_eq!(rows[0].kinetic_energy, 0.125);
        assert!((rows[0].dissipation_rate - 0.75 / REYNOLDS).abs() < 1e-7);
        let (t, peak) = dns_peak();
        assert_eq!(t, 8.97);
        assert!((peak - 0.012858).abs() < 5e-7, "{peak}");
        assert_eq!(dns_rate_at(&rows, 8.97), Some(peak));
        let between = dns_rate_at(&rows, 8.975).unwrap();
        assert!(between > rows[897].dissipation_rate.min(rows[898].dissipation_rate) - 1e-12);
        assert_eq!(dns_rate_at(&rows, 25.0), None);
    }
}
