//! What launching a generated CUDA kernel needs besides its PTX: the block
//! of arguments it takes by value, and the grid that covers a box.
//!
//! Everything a kernel reads that is not field data travels in its
//! arguments, not through copies: one `struct` per kernel, passed by value,
//! holding each field's device pointer and strides, the scalar parameters
//! (time, dt, stage coefficients, user parameters) and the geometry numbers
//! of coordinates and masks; then the target's pointer and strides and the
//! box. A launch therefore costs no host-to-device copy, and a CUDA graph
//! can capture it with its arguments. CUDA limits kernel arguments to
//! 4096 bytes; a kernel that would need more is not generated for CUDA
//! (it is then CPU-only, and placement says why).

use crate::error::{OperatorError, OperatorResult};
use watershed_fields::IndexBox;

/// Most bytes of kernel arguments CUDA accepts (before CUDA 12.1 and on
/// every architecture).
pub const MAX_ARGUMENT_BYTES: usize = 4096;

/// Bytes of the arguments after the struct: the target pointer, its two
/// strides and the six box bounds, 8 bytes each.
const TRAILING_BYTES: usize = 9 * 8;

/// The by-value argument struct of one CUDA kernel: `f[fields]`,
/// `fs[2 * fields]`, `p[parameters]`, `g[geometry]`, each array at least
/// one element long (C has no empty arrays), all 8-byte members, so the
/// struct has no padding.
///
/// ```
/// use watershed_backends::codegen::launch::CudaArguments;
/// let layout = CudaArguments { fields: 2, parameters: 1, geometry: 0 };
/// // f[2], fs[4], p[1], g[1]: 8 numbers of 8 bytes.
/// assert_eq!(layout.struct_bytes(), 64);
/// let block = layout.pack(&[0x1000, 0x2000], &[(10, 100), (12, 144)], &[0.5], &[])?;
/// assert_eq!(block.len(), 64);
/// assert_eq!(&block[8..16], &0x2000u64.to_ne_bytes());
/// assert_eq!(&block[48..56], &0.5f64.to_ne_bytes()); // after f[2] and fs[4]
/// # Ok::<(), watershed_language::OperatorError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaArguments {
    /// Field slots the kernel reads.
    pub fields: usize,
    /// Scalar parameters.
    pub parameters: usize,
    /// Geometry numbers.
    pub geometry: usize,
}

impl CudaArguments {
    /// Elements of each array as declared (at least 1).
    pub fn declared(&self) -> [usize; 4] {
        [
            self.fields.max(1),
            (2 * self.fields).max(1),
            self.parameters.max(1),
            self.geometry.max(1),
        ]
    }

    /// Bytes of the struct.
    pub fn struct_bytes(&self) -> usize {
        self.declared().iter().sum::<usize>() * 8
    }

    /// Bytes of all the kernel's arguments (the struct, then the target
    /// and the box).
    pub fn total_bytes(&self) -> usize {
        self.struct_bytes() + TRAILING_BYTES
    }

    /// The struct's C declaration, named `name`.
    pub fn declaration(&self, name: &str) -> String {
        let [f, fs, p, g] = self.declared();
        format!(
            "struct {name} {{ const double *f[{f}]; long long fs[{fs}]; double p[{p}]; double g[{g}]; }};"
        )
    }

    /// The struct's bytes for one launch: each field's device address and
    /// (y, z) strides in elements, the parameters' values and the geometry,
    /// in the platform's byte order. Refuses lengths that do not match the
    /// layout, naming which.
    pub fn pack(
        &self,
        addresses: &[u64],
        strides: &[(i64, i64)],
        parameters: &[f64],
        geometry: &[f64],
    ) -> OperatorResult<Vec<u8>> {
        for (what, given, expected) in [
            ("field addresses", addresses.len(), self.fields),
            ("field strides", strides.len(), self.fields),
            ("parameters", parameters.len(), self.parameters),
            ("geometry numbers", geometry.len(), self.geometry),
        ] {
            if given != expected {
                return Err(OperatorError::Backend {
                    what: "packing the arguments of a CUDA kernel".into(),
                    reason: format!("{given} {what} given, the kernel takes {expected}"),
                });
            }
        }
        let [f, fs, p, g] = self.declared();
        let mut block = Vec::with_capacity(self.struct_bytes());
        for i in 0..f {
            block.extend_from_slice(&addresses.get(i).copied().unwrap_or(0).to_ne_bytes());
        }
        for i in 0..fs {
            let (sy, sz) = strides.get(i / 2).copied().unwrap_or((0, 0));
            let value = if i % 2 == 0 { sy } else { sz };
            block.extend_from_slice(&value.to_ne_bytes());
        }
        for i in 0..p {
            block.extend_from_slice(&parameters.get(i).copied().unwrap_or(0.0).to_ne_bytes());
        }
        for i in 0..g {
            block.extend_from_slice(&geometry.get(i).copied().unwrap_or(0.0).to_ne_bytes());
        }
        Ok(block)
    }
}

/// Threads per block of a launch and blocks per grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    /// Threads per block along x, y, z.
    pub block: [u32; 3],
    /// Blocks along x, y, z.
    pub grid: [u32; 3],
}

/// Most threads per block a launch uses.
const THREADS_PER_BLOCK: usize = 256;

/// Most blocks along x CUDA allows.
const MAX_GRID_X: usize = 2_147_483_647;

/// Most blocks along y and z CUDA allows.
const MAX_GRID_YZ: usize = 65_535;

impl LaunchShape {
    /// The launch that covers `region` with one thread per point: x in
    /// warps (32 to 256 threads), the rest of 256 threads along y, and one
    /// plane per block along z. Refuses an empty box and one with more
    /// than CUDA's grid allows (2^31 - 1 blocks along x, 65 535 along y
    /// and z), naming the box.
    ///
    /// ```
    /// use watershed_fields::IndexBox;
    /// use watershed_backends::codegen::launch::LaunchShape;
    /// let shape = LaunchShape::covering(IndexBox { lo: [0, 0, 0], hi: [64, 64, 64] })?;
    /// assert_eq!(shape.block, [64, 4, 1]);
    /// assert_eq!(shape.grid, [1, 16, 64]);
    /// # Ok::<(), watershed_language::OperatorError>(())
    /// ```
    pub fn covering(region: IndexBox) -> OperatorResult<LaunchShape> {
        let extent: Vec<usize> = (0..3)
            .map(|a| usize::try_from(region.hi[a] - region.lo[a]).unwrap_or(0))
            .collect();
        if extent.contains(&0) {
            return Err(OperatorError::Backend {
                what: format!("launching a CUDA kernel over {region:?}"),
                reason: "the box holds no point".into(),
            });
        }
        let bx = extent[0].div_ceil(32).clamp(1, THREADS_PER_BLOCK / 32) * 32;
        let by = extent[1].min(THREADS_PER_BLOCK / bx).max(1);
        let block = [bx, by, 1];
        let grid: Vec<usize> = (0..3).map(|a| extent[a].div_ceil(block[a])).collect();
        if grid[0] > MAX_GRID_X || grid[1] > MAX_GRID_YZ || grid[2] > MAX_GRID_YZ {
            return Err(OperatorError::Backend {
                what: format!("launching a CUDA kernel over {region:?}"),
                reason: format!(
                    "it needs {} x {} x {} blocks, above CUDA's {MAX_GRID_X} x {MAX_GRID_YZ} x {MAX_GRID_YZ}; split the patch",
                    grid[0], grid[1], grid[2]
                ),
            });
        }
        let to_u32 = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(LaunchShape {
            block: block.map(to_u32),
            grid: [to_u32(grid[0]), to_u32(grid[1]), to_u32(grid[2])],
        })
    }
}
