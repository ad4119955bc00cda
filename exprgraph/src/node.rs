//! The expression a graph node runs, as one of the forms the graph knows.
//!
//! The graph sees into four built-in forms: it fuses language expressions
//! and modifiers, orders reductions by the parameters they write, groups
//! language nodes side by side and compiles all of them for the CPU or a
//! GPU. Anything else is native code behind the [`Expression`] protocol.
//! [`NodeForm`] names the form once, when the expression is
//! registered, so the passes, the placement and the executors `match` on
//! it instead of asking the trait object what it is.

use crate::expression::{Expression, LanguageExpression, LanguageModifier};
use crate::passes::horizontal::HorizontalGroup;
use crate::reduction::LanguageReduction;
use std::any::Any;
use std::sync::Arc;

/// The expression of one graph node.
///
/// ```
/// use watershed_exprgraph::{LanguageExpression, NodeForm, Tag};
/// use watershed_fields::CellCentre;
/// let u = Tag::none("u");
/// let double = LanguageExpression::new::<CellCentre>(Tag::none("v"), move |s| s.field(&u) * 2.0);
/// let node = NodeForm::from_expression(double);
/// assert!(node.language().is_some());
/// assert_eq!(node.expression().name(), "v");
/// ```
#[derive(Clone)]
pub enum NodeForm {
    /// A field written in the expression language.
    Language(Arc<LanguageExpression>),
    /// A language modifier (boundary conditions) of a field.
    Modifier(Arc<LanguageModifier>),
    /// A reduction into a parameter.
    Reduction(Arc<LanguageReduction>),
    /// Independent language nodes run as one loop nest (horizontal fusion).
    Group(Arc<HorizontalGroup>),
    /// Code the graph cannot see into: native Rust, an iterative solve.
    Native(Arc<dyn Expression>),
}

impl NodeForm {
    /// The form of `expression`: a built-in form when it is one, native
    /// otherwise. This is where a registered expression's concrete type is
    /// looked at, once.
    pub fn from_expression<E: Expression + 'static>(expression: E) -> Self {
        let any: Box<dyn Any> = Box::new(expression);
        let any = match any.downcast::<LanguageExpression>() {
            Ok(language) => return NodeForm::Language(Arc::from(language)),
            Err(other) => other,
        };
        let any = match any.downcast::<LanguageModifier>() {
            Ok(modifier) => return NodeForm::Modifier(Arc::from(modifier)),
            Err(other) => other,
        };
        let any = match any.downcast::<LanguageReduction>() {
            Ok(reduction) => return NodeForm::Reduction(Arc::from(reduction)),
            Err(other) => other,
        };
        let any = match any.downcast::<HorizontalGroup>() {
            Ok(group) => return NodeForm::Group(Arc::from(group)),
            Err(other) => other,
        };
        match any.downcast::<E>() {
            Ok(native) => NodeForm::Native(Arc::new(*native)),
            // `any` was made from an `E` two lines above.
            Err(_) => unreachable!("a boxed value downcasts to its own type"),
        }
    }

    /// The node protocol (name, fields, evaluation) of whichever form.
    pub fn expression(&self) -> &dyn Expression {
        match self {
            NodeForm::Language(e) => e.as_ref(),
            NodeForm::Modifier(e) => e.as_ref(),
            NodeForm::Reduction(e) => e.as_ref(),
            NodeForm::Group(e) => e.as_ref(),
            NodeForm::Native(e) => e.as_ref(),
        }
    }

    /// The language expression, if the node is one.
    pub fn language(&self) -> Option<&LanguageExpression> {
        match self {
            NodeForm::Language(e) => Some(e),
            _ => None,
        }
    }

    /// The language modifier, if the node is one.
    pub fn modifier(&self) -> Option<&LanguageModifier> {
        match self {
            NodeForm::Modifier(e) => Some(e),
            _ => None,
        }
    }

    /// The reduction, if the node is one.
    pub fn reduction(&self) -> Option<&LanguageReduction> {
        match self {
            NodeForm::Reduction(e) => Some(e),
            _ => None,
        }
    }

    /// The horizontal group, if the node is one.
    pub fn group(&self) -> Option<&HorizontalGroup> {
        match self {
            NodeForm::Group(e) => Some(e),
            _ => None,
        }
    }

    /// The language expressions the node runs as its kernels' bodies: the
    /// expression itself, or a group's members in order; none for the
    /// other forms.
    pub fn language_members(&self) -> Vec<&LanguageExpression> {
        match self {
            NodeForm::Language(e) => vec![e.as_ref()],
            NodeForm::Group(group) => group.members().collect(),
            _ => Vec::new(),
        }
    }
}

impl std::fmt::Debug for NodeForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let form = match self {
            NodeForm::Language(_) => "Language",
            NodeForm::Modifier(_) => "Modifier",
            NodeForm::Reduction(_) => "Reduction",
            NodeForm::Group(_) => "Group",
            NodeForm::Native(_) => "Native",
        };
        write!(f, "{form}({})", self.expression().name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expression::NativeExpression;
    use crate::tag::Tag;
    use watershed_fields::{CellCentre, LocationKind};

    #[test]
    fn each_form_is_named_from_its_type() {
        let u = Tag::none("u");
        let w = u.clone();
        let language =
            LanguageExpression::new::<CellCentre>(Tag::none("v"), move |s| s.field(&w) + 1.0);
        assert!(matches!(
            NodeForm::from_expression(language),
            NodeForm::Language(_)
        ));
        let native = NativeExpression::new(
            "copy",
            vec![(Tag::none("c"), LocationKind::CellCentre)],
            vec![u],
            |_| Ok(()),
        );
        let node = NodeForm::from_expression(native);
        assert!(matches!(node, NodeForm::Native(_)));
        assert!(node.language().is_none() && node.reduction().is_none());
        assert_eq!(format!("{node:?}"), "Native(copy)");
    }
}
