//! Tests of the CPU executor against hand-written loops and the shared
//! summation order.

use super::blocks::RowGroup;
use super::blocks::band_order;
use super::features::avx2_rows;
use super::lanes::Extent;
use super::lanes::OutStream;
use super::lanes::Pair;
use super::lanes::Plain;
use super::lanes::Resolved;
use super::lanes::Scaled;
use super::lanes::Shape;
use super::lanes::Stream;
use super::lanes::blend_lanes;
use super::lanes::blend_lanes_avx2;
use super::lanes::map1_lanes;
use super::lanes::map1_lanes_avx2;
use super::lanes::map2_lanes;
use super::lanes::map2_lanes_avx2;
use super::lanes::select;
use super::linear::group_row;
use super::linear::grouped_linear_rows;
use super::linear::linear_rows;
use super::linear::{grouped_linear_avx2, linear_avx2};
use crate::kernel::Kernel;
use crate::kernel::MAX_GROUP_SOURCES;
use crate::kernel::OUTPUT;
use crate::kernel::{KernelField, ReadExtent};
use crate::vocabulary::FieldData;
use crate::vocabulary::Reduction;
use smallvec::SmallVec;
use watershed_fields::FieldLayout;
use watershed_fields::Grid;
use watershed_fields::IndexBox;
use watershed_fields::LocationKind;

/// The interpreter's group loops add in the order of the shared
/// definition (`pairwise_sum`, which the C and CUDA emitter use), bit
/// for bit, for every group size, on values whose sums round
/// differently in other orders.
#[test]
fn the_interpreters_group_sum_is_the_pairwise_sum() {
    let mut state = 7u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let magnitude = [1.0, 1e-9, 3e7][(state >> 61) as usize % 3];
        magnitude * ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5)
    };
    // Two rows of 13 points, 16 apart.
    let (points, stride) = (13usize, 16isize);
    let extent = Extent { n: points, rows: 2 };
    let at = |row: usize, i: usize| row * stride as usize + i;
    let group = |o: &mut [f64], rows: &[Vec<f64>], w: f64, start: Option<f64>| {
        let sources: Vec<Stream> = rows
            .iter()
            .map(|r| Stream {
                pointer: r.as_ptr(),
                row_stride: stride,
            })
            .collect();
        let out = OutStream {
            pointer: o.as_mut_ptr(),
            row_stride: stride,
        };
        for r in 0..extent.rows {
            // SAFETY: every row buffer and the output hold two rows of
            // 16 values, more than 13, and the output is its own buffer.
            unsafe { group_row(out, extent, r, &sources, w, start) };
        }
    };
    for size in 1..=MAX_GROUP_SOURCES {
        let rows: Vec<Vec<f64>> = (0..size)
            .map(|_| (0..32).map(|_| next()).collect())
            .collect();
        // Added to what the rows hold, or assigned from a start value
        // (over rows of NaN, which must not leak).
        for (before, start) in [(0.25, None), (f64::NAN, Some(-0.75))] {
            let mut o = vec![before; 32];
            group(&mut o, &rows, 3.0, start);
            for (row, i) in (0..2).flat_map(|row| (0..points).map(move |i| (row, i))) {
                let tree =
                    crate::kernel::pairwise_sum(rows.iter().map(|r| r[at(row, i)]), |a, b| a + b);
                let expected = start.unwrap_or(before) + 3.0 * tree.unwrap_or(f64::NAN);
                let got = o[at(row, i)];
                assert_eq!(
                    got.to_bits(),
                    expected.to_bits(),
                    "{size} sources, row {row}, point {i}"
                );
            }
            // The points between the rows are not written.
            assert_eq!(o[at(0, points)].to_bits(), before.to_bits());
        }
    }
    // Five values: ((a + b) + (c + d)) + e, not left to right.
    let five: Vec<Vec<f64>> = [1e16, 1.0, -1e16, 1.0, 1.0]
        .iter()
        .map(|&v| vec![v; 32])
        .collect();
    let mut o = vec![f64::NAN; 32];
    group(&mut o, &five, 1.0, Some(0.0));
    assert_eq!(o[0], 1.0);
    assert_eq!(five.iter().map(|v| v[0]).sum::<f64>(), 2.0);
}

/// The AVX2 builds of the linear-form loops give the baseline build's
/// bits: term by term (one to seven terms), as differences, and
/// grouped by weight, over rows of several lengths.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_avx2_linear_loops_give_the_baseline_bits() {
    if !avx2_rows() {
        eprintln!("skipped: no AVX2");
        return;
    }
    let mut state = 11u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let magnitude = [1.0, 1e-9, 3e7][(state >> 61) as usize % 3];
        magnitude * ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5)
    };
    let (rows, stride) = (3usize, 40isize);
    let inputs: Vec<Vec<f64>> = (0..8).map(|_| (0..120).map(|_| next()).collect()).collect();
    let stream = |i: usize| Stream {
        pointer: inputs[i].as_ptr(),
        row_stride: stride,
    };
    for n in [1usize, 3, 8, 13, 37] {
        let extent = Extent { n, rows };
        let run = |f: &dyn Fn(OutStream)| {
            let mut out = vec![f64::NAN; 120];
            f(OutStream {
                pointer: out.as_mut_ptr(),
                row_stride: stride,
            });
            out
        };
        for count in 1..=7 {
            let terms: Vec<(Stream, f64)> = (0..count).map(|i| (stream(i), next())).collect();
            // SAFETY: every stream and the output hold 3 rows of 40
            // values, more than `n`, and the output is its own buffer.
            let baseline = run(&|o| unsafe { linear_rows(o, extent, 0.5, &terms, false) });
            let wide = run(&|o| unsafe { linear_avx2(o, extent, 0.5, &terms, false) });
            assert_eq!(bits(&baseline), bits(&wide), "{count} terms, {n} points");
        }
        let pairs: Vec<(Stream, f64)> = (0..6)
            .map(|i| (stream(i), if i % 2 == 0 { -0.3 } else { 0.3 }))
            .collect();
        // SAFETY: as above.
        let baseline = run(&|o| unsafe { linear_rows(o, extent, 0.0, &pairs, true) });
        let wide = run(&|o| unsafe { linear_avx2(o, extent, 0.0, &pairs, true) });
        assert_eq!(bits(&baseline), bits(&wide), "differences, {n} points");
        let groups: Vec<(f64, SmallVec<[Stream; MAX_GROUP_SOURCES]>)> = vec![
            (0.75, (0..1).map(stream).collect()),
            (-2.5, (1..8).map(stream).collect()),
            (1.0, (2..5).map(stream).collect()),
        ];
        // SAFETY: as above.
        let baseline = run(&|o| unsafe { grouped_linear_rows(o, extent, 0.25, &groups) });
        let wide = run(&|o| unsafe { grouped_linear_avx2(o, extent, 0.25, &groups) });
        assert_eq!(bits(&baseline), bits(&wide), "groups, {n} points");
    }
}

/// Selections and comparisons in both builds: `select` equals the
/// point-wise `if c != 0 { t } else { f }` of `Resolved::at` (NaN
/// conditions included), and the baseline and AVX2 loops of the
/// blend, the copy and a comparison over a [`Shape`] operand give the
/// same bits.
#[cfg(target_arch = "x86_64")]
#[test]
fn selections_and_comparisons_match_the_point_wise_values_in_both_builds() {
    let mut state = 5u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        match (state >> 59) % 8 {
            0 => 0.0,
            1 => f64::NAN,
            2 => -0.0,
            _ => (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5,
        }
    };
    let (rows, stride) = (3usize, 40isize);
    let inputs: Vec<Vec<f64>> = (0..4).map(|_| (0..120).map(|_| next()).collect()).collect();
    let stream = |i: usize| Stream {
        pointer: inputs[i].as_ptr(),
        row_stride: stride,
    };
    let run = |f: &dyn Fn(OutStream)| {
        let mut out = vec![f64::NAN; 120];
        f(OutStream {
            pointer: out.as_mut_ptr(),
            row_stride: stride,
        });
        out
    };
    let condition = Resolved::One(stream(0), 1.0);
    let if_true = Resolved::Two(stream(1), 0.5, stream(2), 0.5);
    let if_false = Resolved::One(stream(3), -3.0);
    for n in [1usize, 5, 8, 37] {
        let extent = Extent { n, rows };
        // SAFETY: every stream and the output hold 3 rows of 40 values,
        // more than `n`, and the output is its own buffer.
        let selected = run(&|o| unsafe { select(o, extent, condition, if_true, if_false) });
        for r in 0..rows {
            for i in 0..n {
                // SAFETY: `r` and `i` are inside the rows read above.
                let expected = unsafe {
                    if condition.at(r, i) != 0.0 {
                        if_true.at(r, i)
                    } else {
                        if_false.at(r, i)
                    }
                };
                let got = selected[r * stride as usize + i];
                assert_eq!(got.to_bits(), expected.to_bits(), "row {r}, point {i}");
            }
        }
        if !avx2_rows() {
            continue;
        }
        let (c, t) = (Plain(stream(0)), Pair(stream(1), 0.5, stream(2), 0.5));
        let f = Scaled(stream(3), -3.0);
        // SAFETY: as above; AVX2 was detected.
        let baseline = run(&|o| unsafe {
            map1_lanes(o, extent, f, |v| v);
            blend_lanes(o, extent, c, t);
        });
        // SAFETY: as above.
        let wide = run(&|o| unsafe {
            map1_lanes_avx2(o, extent, f, |v| v);
            blend_lanes_avx2(o, extent, c, t);
        });
        assert_eq!(bits(&baseline), bits(&wide), "selection, {n} points");
        let shape = Shape(Resolved::Two(stream(1), 0.25, stream(2), 0.25));
        let minimum = |x: f64, y: f64| if x < y { x } else { y };
        // SAFETY: as above.
        let baseline = run(&|o| unsafe { map2_lanes(o, extent, c, shape, minimum) });
        // SAFETY: as above.
        let wide = run(&|o| unsafe { map2_lanes_avx2(o, extent, c, shape, minimum) });
        assert_eq!(bits(&baseline), bits(&wide), "minimum, {n} points");
    }
}

#[cfg(target_arch = "x86_64")]
fn bits(values: &[f64]) -> Vec<u64> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// A kernel that reads one cell field with the z reach `z`.
fn kernel_reading(z: isize) -> Kernel {
    Kernel {
        instructions: Vec::new(),
        extensions: Vec::new(),
        registers: 1,
        halo: 0,
        fields: vec![KernelField {
            id: 1,
            name: "phi".into(),
            location: LocationKind::CellCentre,
            extent: ReadExtent {
                min: [-1, -1, -z],
                max: [1, 1, z],
            },
            transfer: None,
        }],
        parameters: Vec::new(),
        uniforms: Vec::new(),
        location: Some(LocationKind::CellCentre),
        result: OUTPUT,
        identity: Kernel::next_identity(),
    }
}

/// The (k, j) groups of `region` with `rows` rows each.
fn groups_of(region: &IndexBox, rows: usize) -> Vec<RowGroup> {
    let mut groups = Vec::new();
    for k in region.lo[2]..region.hi[2] {
        let mut j0 = region.lo[1];
        while j0 < region.hi[1] {
            let count = rows.min((region.hi[1] - j0) as usize);
            groups.push(RowGroup {
                j0,
                rows: count,
                k,
                planes: 1,
                first_row: 0,
            });
            j0 += count as isize;
        }
    }
    groups
}

/// A cell field of 256 x 300 x 6 points (one ghost layer) and its
/// values: planes of 0.6 MiB.
fn large_plane_field() -> (FieldLayout, Vec<f64>) {
    let grid = Grid::new([256, 300, 6], [1.0; 3], [0.0; 3]).expect("valid grid");
    let layout = FieldLayout::new(&grid.whole_domain(1), LocationKind::CellCentre);
    let data = vec![0.0; layout.allocated_len()];
    (layout, data)
}

#[test]
fn large_planes_read_along_z_are_visited_in_bands_of_every_plane() {
    // 256 x 300 points per plane: a band-row holds the target row
    // (2 KiB) and three planes of phi's row (3 x 2064 B), so a band
    // is BAND_BYTES / 8240 B = 63 rows: three groups of 16.
    let (layout, data) = large_plane_field();
    let fields = [FieldData::new(&data, &layout)];
    let region = layout.interior();
    let groups = groups_of(&region, 16);
    let order = band_order(&kernel_reading(1), &fields, &region, 16, &groups);
    assert_eq!(order.len(), groups.len());
    // Every group exactly once.
    let mut seen: Vec<(isize, isize)> = order.iter().map(|g| (g.k, g.j0)).collect();
    seen.sort_unstable();
    let mut all: Vec<(isize, isize)> = groups.iter().map(|g| (g.k, g.j0)).collect();
    all.sort_unstable();
    assert_eq!(seen, all);
    // First band: rows 0..48 of planes 0, 1, ..., 5, then rows 48..96.
    let first: Vec<(isize, isize)> = order[..4].iter().map(|g| (g.k, g.j0)).collect();
    assert_eq!(first, [(0, 0), (0, 16), (0, 32), (1, 0)]);
    assert_eq!((order[18].k, order[18].j0), (0, 48));
    // The last band holds the plane's last, shorter group.
    let last = order.last().expect("groups");
    assert_eq!((last.k, last.j0, last.rows), (5, 288, 12));
}

#[test]
fn small_planes_and_pointwise_kernels_keep_plane_order() {
    let (layout, data) = large_plane_field();
    let fields = [FieldData::new(&data, &layout)];
    let region = layout.interior();
    let groups = groups_of(&region, 16);
    // No read along z: no plane is read again.
    assert!(band_order(&kernel_reading(0), &fields, &region, 16, &groups).is_empty());
    // A plane whose rows fit the budget.
    let small = IndexBox {
        lo: [0, 0, 0],
        hi: [256, 20, 6],
    };
    let small_groups = groups_of(&small, 16);
    assert!(band_order(&kernel_reading(1), &fields, &small, 16, &small_groups).is_empty());
}

/// The AVX2 build of a row reduction gives the generic lanes' bits (a
/// NaN for a NaN) for every kind, over rows of every length around the lane count, with
/// NaN, infinities, signed zeros, ties and large and small magnitudes.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_row_reductions_give_the_generic_lanes_bits() {
    if !avx2_rows() {
        eprintln!("skipped: no AVX2");
        return;
    }
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        1e300,
        -1e-300,
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for trial in 0..400 {
        let len = trial % 41;
        let values: Vec<f64> = (0..len)
            .map(|_| {
                let r = next();
                // Rows of specials only (ties, signed zeros, NaN
                // against NaN), of ordinary values only, and mixed.
                let special = match trial % 4 {
                    0 => true,
                    1 => false,
                    _ => r % 11 == 0,
                };
                if special {
                    // Three neighbours in the list per row, so that
                    // some rows hold only signed zeros and ones.
                    specials[(trial / 4 + (r >> 8) as usize % 3) % specials.len()]
                } else {
                    ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2f64.powi((r % 40) as i32 - 20)
                }
            })
            .collect();
        for kind in [
            Reduction::Sum,
            Reduction::SumOfSquares,
            Reduction::Min,
            Reduction::Max,
        ] {
            let generic = kind.of_row_lanes(&values);
            // SAFETY: AVX2 was detected above.
            let wide = unsafe { kind.of_row_avx2(&values) };
            // A NaN's sign and payload depend on which operand an
            // instruction propagates; only its being NaN is kept.
            let same = if generic.is_nan() {
                wide.is_nan()
            } else {
                generic.to_bits() == wide.to_bits()
            };
            assert!(same, "{kind:?} of {values:?}: {generic} vs {wide}");
        }
    }
}
