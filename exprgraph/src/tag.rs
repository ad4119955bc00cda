//! Tags: the names of the fields a graph computes.
//!
//! A [`Tag`] is a field name plus a [`Context`] saying which copy of the
//! quantity it is (the solution at the current step, at the next step, or a
//! quantity with no time level), as in ExprLib.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Which copy of a quantity a tag names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Context {
    /// The state at the current time level (`STATE_N`).
    StateN,
    /// The state at the next time level (`STATE_NP1`).
    StateNp1,
    /// No time level: intermediate and auxiliary quantities (`STATE_NONE`).
    StateNone,
    /// Any other context, by name (e.g. a Runge-Kutta stage).
    Other(Arc<str>),
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Context::StateN => f.write_str("STATE_N"),
            Context::StateNp1 => f.write_str("STATE_NP1"),
            Context::StateNone => f.write_str("STATE_NONE"),
            Context::Other(name) => f.write_str(name),
        }
    }
}

/// The name of a field in a graph.
///
/// ```
/// use watershed_exprgraph::{Context, Tag};
/// let phi = Tag::new("phi", Context::StateN);
/// assert_eq!(phi.to_string(), "phi (STATE_N)");
/// assert_ne!(phi, Tag::new("phi", Context::StateNp1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag {
    /// The field name.
    pub name: Arc<str>,
    /// Its context.
    pub context: Context,
}

impl Tag {
    /// A tag.
    pub fn new(name: &str, context: Context) -> Self {
        Tag {
            name: name.into(),
            context,
        }
    }

    /// A tag with no time level ([`Context::StateNone`]).
    pub fn none(name: &str) -> Self {
        Tag::new(name, Context::StateNone)
    }

    /// A number standing for this tag in expression IR leaves: a hash of
    /// name and context with the top bit set, so it never equals the id of
    /// a [`watershed_fields::SpatialField`] (small counters).
    pub fn id(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish() | (1 << 63)
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.context)
    }
}
