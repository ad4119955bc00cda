//! The one error type of the `exprgraph` crate, grouped by phase: building
//! the graph, planning memory, placing nodes on devices, executing. Variants
//! name the tags and nodes at fault.

use crate::tag::Tag;
use watershed_fields::{Device, FieldError, LocationKind};
use watershed_operators::OperatorError;

/// Result alias used throughout the crate.
pub type GraphResult<T> = Result<T, GraphError>;

/// Everything that can go wrong building or running a graph.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    // ---- building --------------------------------------------------------
    /// A required tag has no producer and is no placeholder.
    #[error(
        "tag {tag} is required by {required_by} but nothing computes it; register an expression that computes it or declare it a placeholder"
    )]
    MissingProducer {
        /// The tag nobody computes.
        tag: Tag,
        /// Who required it (an expression name, or "the root list").
        required_by: String,
    },

    /// Two expressions compute the same tag.
    #[error("tag {tag} is computed by both {first} and {second}; remove one of them")]
    DuplicateProducer {
        /// The tag.
        tag: Tag,
        /// The expression registered first.
        first: String,
        /// The expression registered second.
        second: String,
    },

    /// Two reductions write the same parameter.
    #[error(
        "parameter {parameter} is written by both reduction {first} and reduction {second}; give each reduction its own parameter"
    )]
    DuplicateParameterWriter {
        /// The parameter's name.
        parameter: String,
        /// The reduction registered first.
        first: String,
        /// The reduction registered second.
        second: String,
    },

    /// The dependencies form a cycle.
    #[error("the expressions form a cycle: {}", cycle.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" -> "))]
    Cycle {
        /// The tags around the cycle, first repeated at the end.
        cycle: Vec<Tag>,
    },

    /// A tag is used with two different locations.
    #[error("tag {tag} is declared as {first} by {first_by} and as {second} by {second_by}")]
    LocationConflict {
        /// The tag.
        tag: Tag,
        /// First location seen.
        first: LocationKind,
        /// Who declared it.
        first_by: String,
        /// Second location seen.
        second: LocationKind,
        /// Who declared it.
        second_by: String,
    },

    /// A tag that the graph does not hold.
    #[error("tag {tag} is not part of this graph ({what})")]
    UnknownTag {
        /// The tag.
        tag: Tag,
        /// What was attempted.
        what: String,
    },

    /// A field was accessed with the wrong location type.
    #[error("tag {tag} is a {actual} field, but it was accessed as {requested}")]
    WrongLocation {
        /// The tag.
        tag: Tag,
        /// Its location.
        actual: LocationKind,
        /// The location asked for.
        requested: LocationKind,
    },

    /// A field is not available (a scratch field outside its lifetime, or a
    /// field the expression did not declare).
    #[error("field {tag} is not available to {expression}: {reason}")]
    FieldUnavailable {
        /// The tag.
        tag: Tag,
        /// The expression asking.
        expression: String,
        /// Why.
        reason: String,
    },

    /// A field's ghost layers are too few for the stencils that read it.
    #[error(
        "tag {tag} is read {needed} point(s) beyond its interior on the {side} side by {reader}, but {what} has {available} ghost layer(s) there; give it at least {needed} ghost layer(s) on that side (or build the graph with GhostPolicy::Grow to let it size its patch)"
    )]
    MissingGhosts {
        /// The field.
        tag: Tag,
        /// "-x", "+y", ...
        side: &'static str,
        /// Ghost layers needed on that side.
        needed: usize,
        /// Ghost layers present.
        available: usize,
        /// The expression whose stencil reads that far.
        reader: String,
        /// Whose layout was checked ("the graph's patch", a bound field).
        what: String,
    },

    /// A placeholder was read before anything was put in it.
    #[error(
        "placeholder {tag} is read by {reader} but was never bound or written; set it with ExpressionGraph::with_field_mut or bind_placeholder (call ExpressionGraph::fill_placeholder to say that zeros are intended)"
    )]
    PlaceholderNotSet {
        /// The placeholder.
        tag: Tag,
        /// An expression that reads it.
        reader: String,
    },

    /// The graph was used in a way that would deadlock or race.
    #[error("{0}")]
    Usage(String),

    // ---- memory plan ------------------------------------------------------
    /// The memory budget cannot run some expression at all.
    #[error(
        "a memory budget of {budget} bytes is below the {needed} bytes that {expression} needs for its scratch inputs and outputs at once; raise the budget to at least {needed} bytes"
    )]
    BudgetTooSmall {
        /// The budget.
        budget: usize,
        /// The smallest workable budget.
        needed: usize,
        /// The expression that needs it.
        expression: String,
    },

    // ---- placement ---------------------------------------------------------
    /// A placement policy put a node on a device that cannot run it.
    #[error("node {node} cannot run on {device}: {reason}")]
    NotPlaceable {
        /// The node.
        node: String,
        /// The device the policy chose.
        device: Device,
        /// Why not, and what to do.
        reason: String,
    },

    /// A parameter of a placement policy or of its cost model is unusable.
    #[error("placement parameter {parameter} = {value} is unusable: {reason}")]
    PlacementParameter {
        /// The parameter's name.
        parameter: String,
        /// Its value, as given.
        value: String,
        /// What it must be.
        reason: String,
    },

    /// A node is placed on a device this machine or build cannot use.
    #[error("node {node} is placed on {device}, which cannot run it: {reason}")]
    DeviceUnavailable {
        /// The first node placed there.
        node: String,
        /// The device.
        device: Device,
        /// Why, and what to do.
        reason: String,
    },

    // ---- execution ---------------------------------------------------------
    /// An expression failed.
    #[error("expression {expression} failed: {source}")]
    Expression {
        /// The expression's name.
        expression: String,
        /// What went wrong.
        source: Box<GraphError>,
    },

    /// A reduction checking its result
    /// ([`LanguageReduction::checking_finite`](crate::LanguageReduction::checking_finite))
    /// found it not finite.
    #[error(
        "reduction {reduction} into parameter {parameter} gave {value}: a value it reduced is not finite; check the fields it reads (a diverged solution, a field never set)"
    )]
    ReductionNotFinite {
        /// The reduction's name.
        reduction: String,
        /// The parameter it writes.
        parameter: String,
        /// What it found.
        value: f64,
    },

    /// An error of the expression language.
    #[error(transparent)]
    Operator(#[from] OperatorError),

    /// An error of the fields layer.
    #[error(transparent)]
    Field(#[from] FieldError),

    /// A native expression reported a failure.
    #[error("{0}")]
    Native(String),

    /// An expression's code panicked (typically a native closure). The
    /// execution stopped as after any error: GPU work was waited for and
    /// scratch memory returned, and the graph can run again. What the
    /// expression had written is incomplete.
    #[error(
        "it panicked: {message}; the fields it writes are incomplete (fix the expression's code; the graph itself can run again)"
    )]
    Panicked {
        /// The panic's message (or a note that it had none).
        message: String,
    },
}
