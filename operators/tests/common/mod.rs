//! Helpers shared by the operator test files: a seeded random number
//! generator, random grids, patches and fields, point access by signed index,
//! and tolerance checks. Each test file uses a different subset, hence the
//! `dead_code` allowance.

#![allow(dead_code)]

use watershed_fields::{
    Device, FieldLayout, GhostWidth, Grid, IndexBox, Location, Patch, SpatialField,
};

/// A small xorshift64* generator: deterministic from its seed, so every
/// random case can be replayed.
#[derive(Debug, Clone)]
pub struct Xorshift(u64);

impl Xorshift {
    /// A generator from `seed` (any value, zero included).
    pub fn new(seed: u64) -> Self {
        // SplitMix64 of the seed, so nearby seeds give unrelated streams and
        // the state is never zero.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Xorshift((z ^ (z >> 31)) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform integer in `lo..=hi`.
    pub fn int(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    /// An odd integer in `lo..=hi` (`lo` odd).
    pub fn odd(&mut self, lo: usize, hi: usize) -> usize {
        lo + 2 * self.int(0, (hi - lo) / 2)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// A random patch of odd size (3..=9 cells per axis, or 1 on the axes listed
/// as inactive) inside a grid that may extend 0..=2 cells beyond it on each
/// side, so that some patches touch the `+` or `-` domain boundary and some
/// do not. Spacing and origin are random too.
pub fn random_patch(rng: &mut Xorshift, ghosts: GhostWidth, inactive: [bool; 3]) -> Patch {
    let mut cells = [1; 3];
    let mut offset = [0; 3];
    let mut grid_cells = [1; 3];
    for axis in 0..3 {
        if inactive[axis] {
            continue;
        }
        cells[axis] = rng.odd(3, 9);
        offset[axis] = rng.int(0, 2);
        grid_cells[axis] = offset[axis] + cells[axis] + rng.int(0, 2);
    }
    let lengths = [0, 1, 2].map(|_| rng.uniform(0.5, 2.0));
    let origin = [0, 1, 2].map(|_| rng.uniform(-1.0, 1.0));
    let grid = Grid::new(grid_cells, lengths, origin).unwrap();
    Patch::new(&grid, offset, cells, ghosts).unwrap()
}

/// The same as [`random_patch`] but forced not to touch the `+x` boundary
/// (so x-face fields have no extra boundary face) or forced to touch it.
pub fn random_patch_with_plus_x(rng: &mut Xorshift, ghosts: GhostWidth, touches: bool) -> Patch {
    loop {
        let patch = random_patch(rng, ghosts, [false; 3]);
        if patch.plus_boundary()[0] == touches {
            return patch;
        }
    }
}

/// A CPU field named `name` whose every allocated point (ghosts included)
/// holds `value(rng)`.
pub fn random_field<L: Location>(
    name: &str,
    patch: &Patch,
    rng: &mut Xorshift,
    mut value: impl FnMut(&mut Xorshift) -> f64,
) -> SpatialField<L> {
    let mut field = SpatialField::<L>::new(name, patch, Device::Cpu).unwrap();
    for v in field.values_mut().unwrap() {
        *v = value(rng);
    }
    field
}

/// A CPU field whose every allocated point holds `f(index, coordinates)`.
pub fn field_from<L: Location>(
    name: &str,
    patch: &Patch,
    f: impl Fn([isize; 3], [f64; 3]) -> f64,
) -> SpatialField<L> {
    let mut field = SpatialField::<L>::new(name, patch, Device::Cpu).unwrap();
    let layout = field.layout().clone();
    let values = field.values_mut().unwrap();
    for index in layout.allocated() {
        values[layout.linear_index(index)] = f(index, layout.coordinate(index));
    }
    field
}

/// The value sentinel targets start with, to see which points were written.
pub const SENTINEL: f64 = -777.25;

/// A CPU target field filled with [`SENTINEL`].
pub fn sentinel_target<L: Location>(name: &str, patch: &Patch) -> SpatialField<L> {
    let mut field = SpatialField::<L>::new(name, patch, Device::Cpu).unwrap();
    field.fill(SENTINEL).unwrap();
    field
}

/// The value of `field` at the signed index `index` (panics, naming the
/// field, outside the allocated box).
pub fn at<L: Location>(field: &SpatialField<L>, index: [isize; 3]) -> f64 {
    let layout = field.layout();
    assert!(
        layout.allocated().contains(index),
        "reference reads '{}' at {index:?}, outside its allocated box {:?}",
        field.name(),
        layout.allocated()
    );
    field.values().unwrap()[layout.linear_index(index)]
}

/// `index` moved by `by` along `axis`.
pub fn shift(index: [isize; 3], axis: usize, by: isize) -> [isize; 3] {
    let mut moved = index;
    moved[axis] += by;
    moved
}

/// True when `got` equals `want` within `relative * max(1, scale)`, where
/// `scale` is the magnitude of the terms that made up `want` (round-off of a
/// sum is relative to its terms, not to the result). NaN matches NaN.
pub fn close(got: f64, want: f64, scale: f64, relative: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= relative * scale.abs().max(want.abs()).max(1.0)
}

/// Checks every point of `target`: inside `region` it must match
/// `reference(index) = (value, scale)` within relative 1e-12 (see [`close`]);
/// outside it must still hold [`SENTINEL`] bit for bit.
#[track_caller]
pub fn check_region<L: Location>(
    what: &str,
    target: &SpatialField<L>,
    region: &IndexBox,
    reference: impl Fn([isize; 3]) -> (f64, f64),
) {
    let layout: &FieldLayout = target.layout();
    let values = target.values().unwrap();
    let mut checked = 0;
    for index in layout.allocated() {
        let got = values[layout.linear_index(index)];
        if region.contains(index) {
            let (want, scale) = reference(index);
            assert!(
                close(got, want, scale, 1e-12),
                "{what}: at {index:?} got {got:e}, reference {want:e} (scale {scale:e}); patch {:?}",
                layout.patch()
            );
            checked += 1;
        } else {
            assert_eq!(
                got.to_bits(),
                SENTINEL.to_bits(),
                "{what}: point {index:?} outside the region {region:?} was written ({got:e})"
            );
        }
    }
    assert_eq!(
        checked,
        region.len(),
        "{what}: region {region:?} is not inside the target's allocation"
    );
}
