//! The step weights that solve a multigrid's coarsest level exactly, or
//! as well as a given number of steps can.
//!
//! The coarsest level of a multigrid hierarchy is tiny (2 cells per axis
//! on power-of-two grids), and weighted Jacobi solves it slowly: with
//! Neumann sides in 2D the eigenvalues of `D^-1 A` are 0, 1/2 and 1, and
//! 30 sweeps at weight 2/3 reduce the error by only 1.5^-30, one kernel
//! call per sweep (about a third of a V-cycle's calls). A Richardson iteration
//! `x <- x + (w_k / d) (b - A x)` whose weights `w_k` are the inverses of
//! the *distinct* non-zero eigenvalues `mu` of `A / d` removes one
//! eigenvalue's error component per step (`1 - mu / mu_k = 0`), so it
//! solves the level in as many steps as there are distinct eigenvalues:
//! 2 in 2D and 3 in 3D with uniform spacing. The operator is assembled
//! once, at set-up, by applying the level's own language Laplacian (with
//! its boundary fill) to unit vectors, so the eigenvalues are those of the
//! operator the V-cycle runs.
//!
//! [`step_weights`] gives `None`, and the multigrid keeps its Jacobi
//! sweeps, whenever the schedule could not be trusted: an operator that is
//! larger than [`MAX_CELLS`], not symmetric, not semi-definite, with a
//! null space other than the singular problem's constant, with
//! eigenvalues spread over more than
//! [`MAX_SPREAD`] (an early step would amplify the other components more
//! than rounding can bear). A level with no fewer distinct eigenvalues
//! than the Jacobi sweeps it replaces (levels of odd size, such as the
//! 10 x 7 of a 20 x 14 grid) gets as many Chebyshev steps instead: the
//! weights are the inverses of the roots of the Chebyshev polynomial on
//! its non-zero spectrum, which shrink every component by at least `1 /
//! T_m((max + min) / (max - min))` where Jacobi sweeps leave the smooth
//! ones almost untouched. The steps run in Leja order (each next
//! eigenvalue the farthest, in product of distances, from those already
//! taken), which keeps the intermediate amplification small.

/// Coarsest levels with more cells keep their Jacobi sweeps (the dense
/// eigenvalue problem grows as the cube of the cells: about 10 ms at 128
/// cells; power-of-two grids have 4 cells in 2D and 8 in 3D, a 20 x 14
/// grid 70).
pub(crate) const MAX_CELLS: usize = 128;

/// The largest ratio of the largest to the smallest non-zero eigenvalue
/// the schedule accepts.
pub(crate) const MAX_SPREAD: f64 = 1e4;

/// Eigenvalues closer than this fraction of the largest count as one.
const SAME_EIGENVALUE: f64 = 1e-10;

/// The weights `w_k`, in the order to apply them, of a Richardson
/// iteration on `matrix x = b`, where `matrix` is the dense `A / d` of the
/// coarsest level (row-major, square): the exact solve when the matrix has
/// fewer than `max_steps` distinct non-zero eigenvalues, else `max_steps`
/// Chebyshev steps over its non-zero spectrum. `singular`: the problem is
/// defined up to a constant, whose component the caller removes (the
/// matrix must then have exactly one zero eigenvalue). `None` when the
/// schedule would not be trustworthy (module doc) or `max_steps` is 0.
pub(crate) fn step_weights(
    matrix: &[Vec<f64>],
    singular: bool,
    max_steps: usize,
) -> Option<Vec<f64>> {
    let n = matrix.len();
    if n == 0 || n > MAX_CELLS || matrix.iter().any(|row| row.len() != n) {
        return None;
    }
    let scale = matrix.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    if !(scale.is_finite() && scale > 0.0) {
        return None;
    }
    for (i, row) in matrix.iter().enumerate() {
        for (j, &value) in row.iter().enumerate().take(i) {
            if (value - matrix[j][i]).abs() > 1e-12 * scale {
                return None;
            }
        }
    }
    let mut eigenvalues = symmetric_eigenvalues(matrix.to_vec());
    eigenvalues.sort_by(f64::total_cmp);
    let largest = *eigenvalues.last()?;
    if !(largest.is_finite() && largest > 0.0) {
        return None;
    }
    let null = 1e-9 * largest;
    if eigenvalues.iter().any(|&mu| mu < -null) {
        return None;
    }
    let zeros = eigenvalues.iter().filter(|mu| mu.abs() <= null).count();
    if zeros != usize::from(singular) {
        return None;
    }
    let positive: Vec<f64> = eigenvalues.into_iter().filter(|&mu| mu > null).collect();
    if positive
        .first()
        .is_none_or(|&smallest| largest / smallest > MAX_SPREAD)
    {
        return None;
    }
    // Distinct eigenvalues: runs closer than SAME_EIGENVALUE, averaged.
    let mut distinct: Vec<(f64, usize)> = Vec::new();
    for mu in positive {
        match distinct.last_mut() {
            Some((sum, count)) if mu - *sum / *count as f64 <= SAME_EIGENVALUE * largest => {
                *sum += mu;
                *count += 1;
            }
            _ => distinct.push((mu, 1)),
        }
    }
    let mut remaining: Vec<f64> = distinct
        .into_iter()
        .map(|(sum, count)| sum / count as f64)
        .collect();
    if remaining.len() >= max_steps {
        if max_steps == 0 {
            return None;
        }
        // Too many distinct eigenvalues for an exact solve: the roots of
        // the Chebyshev polynomial of degree `max_steps` on [smallest,
        // largest] instead, the fastest `max_steps` steps can shrink every
        // component (by 1 / T_m((largest + smallest) / (largest -
        // smallest)) at least).
        let (low, high) = (remaining[0], largest);
        let (centre, half) = ((high + low) / 2.0, (high - low) / 2.0);
        remaining = (0..max_steps)
            .map(|k| {
                let angle = std::f64::consts::PI * (2 * k + 1) as f64 / (2 * max_steps) as f64;
                centre + half * angle.cos()
            })
            .collect();
    }
    // Leja order, starting from the largest.
    let mut ordered: Vec<f64> = Vec::with_capacity(remaining.len());
    while !remaining.is_empty() {
        let next = (0..remaining.len())
            .max_by(|&a, &b| {
                let distance = |mu: f64| ordered.iter().map(|&o| (mu - o).abs()).product::<f64>();
                if ordered.is_empty() {
                    remaining[a].total_cmp(&remaining[b])
                } else {
                    distance(remaining[a]).total_cmp(&distance(remaining[b]))
                }
            })
            .unwrap_or(0);
        ordered.push(remaining.swap_remove(next));
    }
    Some(ordered.into_iter().map(|mu| 1.0 / mu).collect())
}

/// The eigenvalues of the symmetric matrix `a` by cyclic Jacobi rotations
/// (in no particular order), to about the rounding of its largest entry.
fn symmetric_eigenvalues(mut a: Vec<Vec<f64>>) -> Vec<f64> {
    let n = a.len();
    let total: f64 = a.iter().flatten().map(|v| v * v).sum();
    for _ in 0..64 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i][j] * a[i][j])
            .sum();
        if off <= 1e-32 * total {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p][q];
                if apq == 0.0 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for row in a.iter_mut() {
                    let (kp, kq) = (row[p], row[q]);
                    row[p] = c * kp - s * kq;
                    row[q] = s * kp + c * kq;
                }
                let (head, tail) = a.split_at_mut(q);
                for (pk, qk) in head[p].iter_mut().zip(tail[0].iter_mut()) {
                    let (x, y) = (*pk, *qk);
                    *pk = c * x - s * y;
                    *qk = s * x + c * y;
                }
            }
        }
    }
    (0..n).map(|i| a[i][i]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `A / d` of the 1D Laplacian on `n` cells with `d = -2`: Neumann
    /// ends (the ghost mirrors the cell) or Dirichlet ends (the ghost is
    /// the cell's negative).
    fn line(n: usize, dirichlet: bool) -> Vec<Vec<f64>> {
        let mut m = vec![vec![0.0; n]; n];
        for i in 0..n {
            let end = usize::from(i == 0) + usize::from(i + 1 == n);
            m[i][i] = (2.0 - end as f64 + if dirichlet { 2.0 * end as f64 } else { 0.0 }) / 2.0;
            if i > 0 {
                m[i][i - 1] = -0.5;
            }
            if i + 1 < n {
                m[i][i + 1] = -0.5;
            }
        }
        m
    }

    #[test]
    fn known_spectra_are_found() {
        // 1D, 5 cells, Neumann: (1 - cos(pi k / 5)) for k = 0..4.
        let mut found = symmetric_eigenvalues(line(5, false));
        found.sort_by(f64::total_cmp);
        for (k, mu) in found.iter().enumerate() {
            let exact = 1.0 - (std::f64::consts::PI * k as f64 / 5.0).cos();
            assert!((mu - exact).abs() < 1e-14, "{k}: {mu} vs {exact}");
        }
    }

    /// The 2x2 Neumann level (as `A / d` with the interior diagonal
    /// `d = -4 / h^2`) has eigenvalues 0, 1/2, 1/2, 1: two steps, of
    /// weights 1 and 2 (Leja order: the largest eigenvalue first), which
    /// solve any right-hand side orthogonal to the constant.
    #[test]
    fn a_two_by_two_neumann_level_takes_two_steps_that_solve_it() {
        // Cells (0,0), (1,0), (0,1), (1,1); each has one neighbour per axis.
        let m = vec![
            vec![0.5, -0.25, -0.25, 0.0],
            vec![-0.25, 0.5, 0.0, -0.25],
            vec![-0.25, 0.0, 0.5, -0.25],
            vec![0.0, -0.25, -0.25, 0.5],
        ];
        let weights = step_weights(&m, true, 30).expect("a schedule");
        assert_eq!(weights.len(), 2);
        assert!(
            (weights[0] - 1.0).abs() < 1e-14 && (weights[1] - 2.0).abs() < 1e-14,
            "{weights:?}"
        );
        // Richardson on m x = b from zero, b of zero mean.
        let b = [1.0, -3.0, 0.5, 1.5];
        let mut x = [0.0; 4];
        for w in &weights {
            let r: Vec<f64> = (0..4)
                .map(|i| b[i] - (0..4).map(|j| m[i][j] * x[j]).sum::<f64>())
                .collect();
            for i in 0..4 {
                x[i] += w * r[i];
            }
        }
        for i in 0..4 {
            let ax: f64 = (0..4).map(|j| m[i][j] * x[j]).sum();
            assert!((ax - b[i]).abs() < 1e-14, "row {i}: {ax} vs {}", b[i]);
        }
    }

    #[test]
    fn the_schedule_is_refused_where_it_cannot_be_trusted() {
        // Not symmetric.
        let mut m = line(3, true);
        m[0][1] = -0.4;
        assert_eq!(step_weights(&m, false, 30), None);
        // A null space where the problem is said to be regular, and none
        // where it is said to be singular.
        assert_eq!(step_weights(&line(3, false), false, 30), None);
        assert_eq!(step_weights(&line(3, true), true, 30), None);
        // Indefinite.
        let negated: Vec<Vec<f64>> = line(3, true)
            .into_iter()
            .map(|row| row.into_iter().map(|v| -v).collect())
            .collect();
        assert_eq!(step_weights(&negated, false, 30), None);
        // No step at all.
        assert_eq!(step_weights(&line(5, true), false, 0), None);
        // Too spread (eigenvalues 1 and 1e-5) and too large.
        let spread = vec![vec![1.0, 0.0], vec![0.0, 1e-5]];
        assert_eq!(step_weights(&spread, false, 30), None);
        let bearable = vec![vec![1.0, 0.0], vec![0.0, 1e-3]];
        assert!(step_weights(&bearable, false, 30).is_some());
        assert_eq!(step_weights(&line(MAX_CELLS + 1, true), false, 1000), None);
        // Not finite.
        let mut m = line(3, true);
        m[1][1] = f64::NAN;
        assert_eq!(step_weights(&m, false, 30), None);
    }

    /// With more distinct eigenvalues than steps, the steps are
    /// Chebyshev's: the error left is within `1 / T_m(sigma)` of the
    /// solution (`sigma = (max + min) / (max - min)`), far below what as
    /// many Jacobi steps at weight 2/3 leave. A 20-cell Dirichlet line (20
    /// distinct eigenvalues), 16 steps, against a tridiagonal solve.
    #[test]
    fn too_many_eigenvalues_get_chebyshev_steps() {
        let n = 20;
        let m = line(n, true);
        let weights = step_weights(&m, false, 16).expect("a schedule");
        assert_eq!(weights.len(), 16);
        let b: Vec<f64> = (0..n).map(|i| ((i * 7 % 11) as f64 - 5.0) / 3.0).collect();
        // The exact solution by the Thomas algorithm.
        let (mut c, mut d) = (vec![0.0; n], vec![0.0; n]);
        for i in 0..n {
            let lower = if i > 0 { m[i][i - 1] } else { 0.0 };
            let upper = if i + 1 < n { m[i][i + 1] } else { 0.0 };
            let denominator = m[i][i] - lower * if i > 0 { c[i - 1] } else { 0.0 };
            c[i] = upper / denominator;
            d[i] = (b[i] - lower * if i > 0 { d[i - 1] } else { 0.0 }) / denominator;
        }
        let mut exact = vec![0.0; n];
        for i in (0..n).rev() {
            exact[i] = d[i] - if i + 1 < n { c[i] * exact[i + 1] } else { 0.0 };
        }
        let richardson = |weights: &[f64]| {
            let mut x = vec![0.0; n];
            for w in weights {
                let r: Vec<f64> = (0..n)
                    .map(|i| b[i] - (0..n).map(|j| m[i][j] * x[j]).sum::<f64>())
                    .collect();
                for i in 0..n {
                    x[i] += w * r[i];
                }
            }
            let error: f64 = x
                .iter()
                .zip(&exact)
                .map(|(a, e)| (a - e).powi(2))
                .sum::<f64>()
                .sqrt();
            error / exact.iter().map(|e| e * e).sum::<f64>().sqrt()
        };
        let mut eigenvalues = symmetric_eigenvalues(m.clone());
        eigenvalues.sort_by(f64::total_cmp);
        let (low, high) = (eigenvalues[0], eigenvalues[n - 1]);
        let sigma: f64 = (high + low) / (high - low);
        let bound = 1.0 / (16.0 * sigma.acosh()).cosh();
        let chebyshev = richardson(&weights);
        let jacobi = richardson(&[2.0 / 3.0; 16]);
        assert!(
            chebyshev <= bound * (1.0 + 1e-9),
            "{chebyshev} vs bound {bound}"
        );
        assert!(
            chebyshev < 0.25 * jacobi,
            "Chebyshev {chebyshev} vs Jacobi {jacobi}"
        );
    }

    /// Every accepted schedule solves its system to rounding: random
    /// symmetric positive definite matrices with few distinct eigenvalues
    /// (`Q diag Q^T` from Householder reflections).
    #[test]
    fn accepted_schedules_solve_their_systems() {
        let mut state = 17u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for n in [2usize, 4, 8] {
            let values = [1.0, 0.25, 0.6];
            let v: Vec<f64> = (0..n).map(|_| next() - 0.5).collect();
            let norm2: f64 = v.iter().map(|x| x * x).sum();
            // Q = I - 2 v v^T / |v|^2; m = Q diag Q^T.
            let q = |i: usize, j: usize| f64::from(u8::from(i == j)) - 2.0 * v[i] * v[j] / norm2;
            let diag: Vec<f64> = (0..n).map(|i| values[i % 3]).collect();
            let m: Vec<Vec<f64>> = (0..n)
                .map(|i| {
                    (0..n)
                        .map(|j| (0..n).map(|k| q(i, k) * diag[k] * q(j, k)).sum())
                        .collect()
                })
                .collect();
            let weights = step_weights(&m, false, 30).expect("a schedule");
            assert_eq!(
                weights.len(),
                diag.iter()
                    .fold(Vec::<f64>::new(), |mut d, &x| {
                        if !d.contains(&x) {
                            d.push(x);
                        }
                        d
                    })
                    .len()
            );
            let b: Vec<f64> = (0..n).map(|_| next() - 0.5).collect();
            let mut x = vec![0.0; n];
            for w in &weights {
                let r: Vec<f64> = (0..n)
                    .map(|i| b[i] - (0..n).map(|j| m[i][j] * x[j]).sum::<f64>())
                    .collect();
                for i in 0..n {
                    x[i] += w * r[i];
                }
            }
            for i in 0..n {
                let ax: f64 = (0..n).map(|j| m[i][j] * x[j]).sum();
                assert!(
                    (ax - b[i]).abs() < 1e-13,
                    "n = {n}, row {i}: {ax} vs {}",
                    b[i]
                );
            }
        }
    }
}
