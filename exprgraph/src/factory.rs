//! The factory: who computes which tag.
//!
//! Expressions are registered through *builders* (closures that make the
//! expression when a graph needs it); the factory refuses a second producer
//! for a tag at registration, naming both. Placeholders declare fields that
//! come from outside (state variables, fields an outer framework owns), and
//! modifiers attach to a tag to run right after its producer (boundary
//! conditions are the first use). Reductions register under the tag naming
//! their scalar result ([`Factory::register_reduction`]).

use crate::error::{GraphError, GraphResult};
use crate::expression::Expression;
use crate::node::NodeForm;
use crate::reduction::LanguageReduction;
use crate::tag::Tag;
use std::collections::HashMap;
use std::sync::Arc;
use watershed_fields::LocationKind;

/// Makes an expression for a graph.
pub type Builder = Arc<dyn Fn() -> NodeForm + Send + Sync>;

/// A registered builder, with its expression's name for messages.
#[derive(Clone)]
pub(crate) struct Registration {
    pub builder: Builder,
    pub name: String,
}

/// Registered builders, placeholders and modifiers.
///
/// ```
/// use watershed_exprgraph::{Factory, LanguageExpression, Tag};
/// use watershed_fields::{CellCentre, LocationKind};
/// use watershed_operators::laplacian;
/// let (phi, rhs) = (Tag::none("phi"), Tag::none("rhs"));
/// let mut factory = Factory::new();
/// factory.placeholder(phi.clone(), LocationKind::CellCentre).unwrap();
/// let p = phi.clone();
/// factory.register(LanguageExpression::new::<CellCentre>(rhs.clone(), move |s| laplacian(s.field(&p)))).unwrap();
/// // A second producer of `rhs` is refused.
/// let p = phi.clone();
/// assert!(factory.register(LanguageExpression::new::<CellCentre>(rhs, move |s| s.field(&p) * 2.0)).is_err());
/// ```
#[derive(Default, Clone)]
pub struct Factory {
    pub(crate) registrations: Vec<Registration>,
    pub(crate) producer_of: HashMap<Tag, usize>,
    pub(crate) placeholders: HashMap<Tag, LocationKind>,
    pub(crate) modifiers: HashMap<Tag, Vec<Registration>>,
    /// Reductions by the tag naming their result.
    pub(crate) reductions: HashMap<Tag, Registration>,
    /// The result tag of the reduction writing each parameter (by id).
    pub(crate) reduction_writing: HashMap<u64, Tag>,
}

impl Factory {
    /// An empty factory.
    pub fn new() -> Self {
        Factory::default()
    }

    /// Registers one expression (shared by every graph built from this factory).
    pub fn register(&mut self, expression: impl Expression + 'static) -> GraphResult<()> {
        let shared = NodeForm::from_expression(expression);
        self.register_node(Arc::new(move || shared.clone()))
    }

    /// Registers a builder; it is called once to learn what the expression
    /// computes, and again for each graph that needs it.
    pub fn register_builder<E: Expression + 'static>(
        &mut self,
        builder: impl Fn() -> E + Send + Sync + 'static,
    ) -> GraphResult<()> {
        self.register_node(Arc::new(move || NodeForm::from_expression(builder())))
    }

    /// Registers a builder of graph nodes (see [`Self::register_builder`]).
    fn register_node(&mut self, builder: Builder) -> GraphResult<()> {
        let prototype = builder();
        let prototype = prototype.expression();
        let name = prototype.name();
        let computes = prototype.computes();
        for (tag, _) in &computes {
            if let Some(&existing) = self.producer_of.get(tag) {
                return Err(GraphError::DuplicateProducer {
                    tag: tag.clone(),
                    first: self.registrations[existing].name.clone(),
                    second: name,
                });
            }
            if self.placeholders.contains_key(tag) {
                return Err(GraphError::DuplicateProducer {
                    tag: tag.clone(),
                    first: "a placeholder".into(),
                    second: name,
                });
            }
            if let Some(reduction) = self.reductions.get(tag) {
                return Err(GraphError::DuplicateProducer {
                    tag: tag.clone(),
                    first: reduction.name.clone(),
                    second: name,
                });
            }
        }
        let index = self.registrations.len();
        for (tag, _) in &computes {
            self.producer_of.insert(tag.clone(), index);
        }
        self.registrations.push(Registration { builder, name });
        Ok(())
    }

    /// Registers a reduction under the tag naming its result: a graph
    /// runs it when that tag is one of its roots or when one of its nodes
    /// reads the reduction's parameter (see [`crate::reduction`]). The tag
    /// must name nothing else, and no other reduction may write the same
    /// parameter.
    pub fn register_reduction(&mut self, reduction: LanguageReduction) -> GraphResult<()> {
        let tag = reduction.result().clone();
        let name = reduction.name();
        if reduction.requires_tags().is_empty() {
            return Err(GraphError::Usage(format!(
                "reduction {name} reads no field of the graph, so it has no grid to reduce over; build its expression from fields named with `Symbols::field`"
            )));
        }
        let first = if let Some(&existing) = self.producer_of.get(&tag) {
            Some(self.registrations[existing].name.clone())
        } else if self.placeholders.contains_key(&tag) {
            Some("a placeholder".to_string())
        } else {
            self.reductions.get(&tag).map(|r| r.name.clone())
        };
        if let Some(first) = first {
            return Err(GraphError::DuplicateProducer {
                tag,
                first,
                second: name,
            });
        }
        let parameter = reduction.parameter();
        if let Some(other) = self.reduction_writing.get(&parameter.id()) {
            return Err(GraphError::DuplicateParameterWriter {
                parameter: parameter.name().to_string(),
                first: self.reductions[other].name.clone(),
                second: name,
            });
        }
        self.reduction_writing.insert(parameter.id(), tag.clone());
        let shared = NodeForm::Reduction(Arc::new(reduction));
        self.reductions.insert(
            tag,
            Registration {
                name,
                builder: Arc::new(move || shared.clone()),
            },
        );
        Ok(())
    }

    /// Declares `tag` a field provided from outside the graph.
    pub fn placeholder(&mut self, tag: Tag, location: LocationKind) -> GraphResult<()> {
        if let Some(&existing) = self.producer_of.get(&tag) {
            return Err(GraphError::DuplicateProducer {
                tag,
                first: self.registrations[existing].name.clone(),
                second: "a placeholder".into(),
            });
        }
        if let Some(reduction) = self.reductions.get(&tag) {
            return Err(GraphError::DuplicateProducer {
                tag,
                first: reduction.name.clone(),
                second: "a placeholder".into(),
            });
        }
        self.placeholders.insert(tag, location);
        Ok(())
    }

    /// Attaches `modifier` to `target`: it runs right after `target`'s
    /// producer (and earlier modifiers), before any consumer of `target`.
    /// The modifier must list `target` among the fields it computes.
    pub fn attach_modifier(
        &mut self,
        target: Tag,
        modifier: impl Expression + 'static,
    ) -> GraphResult<()> {
        let shared = NodeForm::from_expression(modifier);
        let computes = shared.expression().computes();
        if !computes.iter().any(|(t, _)| *t == target) {
            return Err(GraphError::UnknownTag {
                tag: target,
                what: format!(
                    "modifier {} does not list it among the fields it computes",
                    shared.expression().name()
                ),
            });
        }
        let registration = Registration {
            name: shared.expression().name(),
            builder: Arc::new(move || shared.clone()),
        };
        self.modifiers.entry(target).or_default().push(registration);
        Ok(())
    }
}
