//! Launch shapes and argument blocks of generated CUDA kernels
//! (`watershed_operators::codegen::launch`), checked without a GPU.

use proptest::prelude::*;
use watershed_fields::IndexBox;
use watershed_operators::OperatorError;
use watershed_operators::codegen::launch::{CudaArguments, LaunchShape};

proptest! {
    /// The grid covers every point of the box with one thread each, no
    /// block lies wholly outside it, blocks hold whole warps along x and at
    /// most 256 threads.
    #[test]
    fn a_launch_covers_its_box_exactly(
        lo in prop::array::uniform3(-4isize..4),
        extent in prop::array::uniform3(1isize..600),
    ) {
        let region = IndexBox { lo, hi: [lo[0] + extent[0], lo[1] + extent[1], lo[2] + extent[2]] };
        let shape = LaunchShape::covering(region).unwrap();
        prop_assert_eq!(shape.block[0] % 32, 0);
        prop_assert!(shape.block.iter().product::<u32>() <= 256, "{:?}", shape);
        for (a, &n) in extent.iter().enumerate() {
            let (b, g) = (shape.block[a] as isize, shape.grid[a] as isize);
            prop_assert!(b * g >= n, "axis {}: {:?} does not cover {}", a, shape, n);
            prop_assert!(b * (g - 1) < n, "axis {}: {:?} has an empty block for {}", a, shape, n);
        }
    }
}

#[test]
fn an_empty_or_oversized_box_is_refused_with_the_box() {
    let empty = IndexBox {
        lo: [0, 0, 0],
        hi: [4, 0, 4],
    };
    let error = LaunchShape::covering(empty).unwrap_err();
    assert!(matches!(error, OperatorError::Backend { .. }), "{error:?}");
    assert!(error.to_string().contains("no point"), "{error}");
    let tall = IndexBox {
        lo: [0, 0, 0],
        hi: [1, 600_000, 1],
    };
    let error = LaunchShape::covering(tall).unwrap_err();
    assert!(
        error.to_string().contains("1 x 75000 x 1 blocks"),
        "{error}"
    );
    assert!(error.to_string().contains("split the patch"), "{error}");
}

#[test]
fn the_argument_block_is_laid_out_as_the_struct_declares() {
    let layout = CudaArguments {
        fields: 3,
        parameters: 2,
        geometry: 4,
    };
    assert_eq!(
        layout.declaration("k_args"),
        "struct k_args { const double *f[3]; long long fs[6]; double p[2]; double g[4]; };"
    );
    let block = layout
        .pack(
            &[10, 20, 30],
            &[(1, 2), (3, 4), (5, 6)],
            &[0.25, -1.5],
            &[1.0, 2.0, 3.0, 4.0],
        )
        .unwrap();
    assert_eq!(block.len(), layout.struct_bytes());
    let word = |i: usize| <[u8; 8]>::try_from(&block[8 * i..8 * i + 8]).unwrap();
    assert_eq!(u64::from_ne_bytes(word(2)), 30);
    assert_eq!(
        i64::from_ne_bytes(word(3 + 3)),
        4,
        "fs[3] is field 1's z stride"
    );
    assert_eq!(f64::from_ne_bytes(word(9 + 1)), -1.5);
    assert_eq!(f64::from_ne_bytes(word(11 + 3)), 4.0);
    assert_eq!(layout.total_bytes(), layout.struct_bytes() + 72);
    // A kernel without parameters still declares one (C has no empty arrays).
    let bare = CudaArguments {
        fields: 1,
        parameters: 0,
        geometry: 0,
    };
    assert_eq!(bare.struct_bytes(), 5 * 8);
    let error = layout
        .pack(&[10, 20, 30], &[(1, 2); 3], &[0.25], &[0.0; 4])
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("1 parameters given, the kernel takes 2"),
        "{error}"
    );
}
