//! # watershed-operators
//!
//! The field-expression language of Watershed (its Nebo): a runtime IR that is
//! the single source of truth for CPU evaluation, CUDA code generation,
//! fusion and ghost/stencil-extent analysis, a typed front end whose
//! locations are checked at compile time (`rhs <<= -div(flux) + src`), the
//! staggered stencil operators (gradient, divergence, interpolants, upwind and
//! flux-limited interpolation), reductions, and the fused CPU evaluator.
//!
//! Not built yet: this crate is the place for the field-expression-language
//! issue. It depends only on [`watershed_fields`].

pub use watershed_fields as fields;
