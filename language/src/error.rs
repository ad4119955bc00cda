//! The one error type of the expression stages (language, lowering, back
//! ends, operators). Variants name the target
//! field, the field at fault and what to change.

use watershed_fields::{FieldError, LocationKind};

/// Result alias used throughout the crate.
pub type OperatorResult<T> = Result<T, OperatorError>;

/// Everything that can go wrong building or evaluating an expression.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// A field could not be accessed (e.g. its CPU copy is not valid).
    #[error(transparent)]
    Field(#[from] FieldError),

    /// A field of the expression lives on another grid or patch than the target.
    #[error(
        "cannot assign to '{target}': field '{field}' is on a different grid or patch ({detail}); every field of an assignment must share the target's patch"
    )]
    GridMismatch {
        /// The assignment's target.
        target: String,
        /// The mismatched field.
        field: String,
        /// How the patches differ.
        detail: String,
    },

    /// A field lacks the ghost layers the stencils need over the region.
    #[error(
        "cannot compute '{target}' over {region}: field '{field}' is read {needed} point(s) beyond its interior on the {side} side but has {available} ghost layer(s) there; give '{field}' at least {needed} ghost layer(s) on that side or shrink the region"
    )]
    MissingGhosts {
        /// The assignment's target (or "reduction").
        target: String,
        /// The field that is too small.
        field: String,
        /// "-x", "+y", ...
        side: String,
        /// Ghost layers needed.
        needed: usize,
        /// Ghost layers present.
        available: usize,
        /// The region being computed, e.g. "the interior [0, 16) x [0, 16) x [0, 1)".
        region: String,
    },

    /// The target is also read by the expression.
    #[error(
        "cannot assign to '{target}': the expression reads '{field}', which shares its memory; a fused pass would read values it has already overwritten. Assign into another field and copy, or split the update"
    )]
    Aliasing {
        /// The assignment's target.
        target: String,
        /// The field sharing the target's memory.
        field: String,
    },

    /// The expression's location differs from the target's.
    #[error("cannot assign a {found} expression to '{target}', a {expected} field")]
    LocationMismatch {
        /// The assignment's target.
        target: String,
        /// The target's location.
        expected: LocationKind,
        /// The expression's location.
        found: LocationKind,
    },

    /// The IR names a field that was not supplied for evaluation.
    #[error("the expression reads field '{name}' (id {id}), which was not bound for evaluation")]
    UnboundField {
        /// The field's id.
        id: u64,
        /// The field's name.
        name: String,
    },

    /// A reduction of an expression without fields has no grid to run on.
    #[error(
        "{what}: the expression reads no field, so it has no grid; reduce over an expression that reads at least one field"
    )]
    NoGrid {
        /// What was attempted.
        what: String,
    },

    /// An axis number outside 0..=2.
    #[error("{what}: axis {axis} does not exist; axes are 0 (x), 1 (y) and 2 (z)")]
    InvalidAxis {
        /// The operation with the bad axis.
        what: String,
        /// The axis given.
        axis: usize,
    },

    /// A region that is not inside the target's allocated points.
    #[error(
        "cannot compute '{target}' over {region}: the target's allocated points are {allocated}; give it more ghost layers or compute a smaller region"
    )]
    RegionOutsideTarget {
        /// The assignment's target.
        target: String,
        /// The region asked for.
        region: String,
        /// What the target holds.
        allocated: String,
    },

    /// A shift farther than any field's ghost layers could reach.
    #[error(
        "{what}: the offset {offset:?} is out of range; shifts are limited to {limit} points per axis"
    )]
    InvalidOffset {
        /// The operation.
        what: String,
        /// The offset given.
        offset: [isize; 3],
        /// The largest allowed magnitude per axis.
        limit: isize,
    },

    /// An assignment asked to check its result (`AssignOptions::check_finite` of `watershed-operators`)
    /// wrote a value that is not finite.
    #[error(
        "'{target}' is not finite at point {point:?} ({value}) after it was computed; an input is not finite, the time step is unstable, or a function was evaluated outside its domain (log or sqrt of a negative number, pow of a negative base with a non-integer exponent, sin or cos of |x| > {limit:e})",
        limit = crate::vmath::SIN_COS_MAX_ARGUMENT
    )]
    NotFinite {
        /// The assignment's target.
        target: String,
        /// The first point (z, then y, then x order) that is not finite.
        point: [isize; 3],
        /// The value found there.
        value: f64,
    },

    /// An inter-grid operator (restriction, prolongation) that cannot be
    /// applied as written.
    #[error("cannot transfer '{field}' between grids: {reason}")]
    InterGrid {
        /// The field (or expression) at fault.
        field: String,
        /// What is wrong and what to do.
        reason: String,
    },

    /// An assignment that reads its own target where it writes.
    #[error(
        "'{target}' reads itself at offset {offset:?} over {region}, which overlaps the points it writes; an in-place update may read its target only at offset 0, and a boundary modifier only outside the points it writes"
    )]
    SelfOverlap {
        /// The assignment's target.
        target: String,
        /// The offending offset range.
        offset: [isize; 3],
        /// The region written.
        region: String,
    },

    /// The C compiler (or NVRTC) refused a generated kernel: a bug in the
    /// code generator. The message carries the source and the compiler's log.
    #[error(
        "compiling the generated {} kernel {} failed with `{}`; run with WATERSHED_BACKEND=interpreter to continue, and report this with the source and log below.\n--- source ---\n{}\n--- compiler log ---\n{}",
        .0.dialect, .0.kernel, .0.command, .0.source_text, .0.log
    )]
    Compile(Box<CompileFailure>),

    /// A compiled-kernel cache entry or compiler could not be used for a
    /// reason outside the generated code (a directory that cannot be
    /// written, a library that cannot be loaded twice in a row).
    #[error("compiled kernels: {what}: {reason}")]
    Backend {
        /// What was being done.
        what: String,
        /// Why it failed and what to do.
        reason: String,
    },
}

/// What a failed compilation of a generated kernel leaves to look at.
#[derive(Debug, Clone)]
pub struct CompileFailure {
    /// "C" or "CUDA C".
    pub dialect: String,
    /// The kernel's name (its cache key).
    pub kernel: String,
    /// The command run.
    pub command: String,
    /// The generated source.
    pub source_text: String,
    /// What the compiler printed.
    pub log: String,
}
