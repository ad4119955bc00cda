//! The registry of cases: every case the `watershed` program can run, and
//! finding one by name. What a case is ([`CaseInfo`], [`CaseOptions`],
//! [`Prepared`]) is in [`crate::case`].

pub use crate::case::{CaseInfo, CaseOptions, Prepared};
use crate::error::{CaseError, CaseResult};

/// Every registered case, sorted by name.
pub fn registered_cases() -> Vec<CaseInfo> {
    let mut cases = vec![
        crate::cases::cavity::INFO,
        crate::cases::channel::INFO,
        crate::cases::cylinder::INFO,
        crate::cases::taylor_green::INFO,
        crate::cases::heat::INFO,
        crate::cases::advection::INFO,
        crate::cases::reacting::INFO,
        crate::cases::scalability::EXPRLIB_INFO,
        crate::cases::scalability::WASATCH_INFO,
    ];
    cases.sort_by_key(|c| c.name);
    cases
}

/// The case called `name`.
pub fn find_case(name: &str) -> CaseResult<CaseInfo> {
    let cases = registered_cases();
    cases
        .iter()
        .find(|c| c.name == name)
        .copied()
        .ok_or_else(|| CaseError::UnknownCase {
            name: name.into(),
            known: cases.iter().map(|c| c.name).collect::<Vec<_>>().join(", "),
        })
}

#[cfg(test)]
mod tests {
    use crate::cases::{advection, cavity, heat, reacting, scalability, taylor_green};
    use crate::config::CaseConfig;

    fn documented_is_default<C: CaseConfig + PartialEq>() {
        let parsed: C = toml::from_str(C::DOCUMENTED).expect("the documented file parses");
        assert_eq!(parsed, C::default(), "{}", C::DOCUMENTED);
        assert_eq!(C::default().check_ranges(), None);
    }

    #[test]
    fn every_documented_file_holds_the_defaults() {
        documented_is_default::<cavity::CavityConfig>();
        documented_is_default::<taylor_green::TaylorGreenConfig>();
        documented_is_default::<heat::HeatConfig>();
        documented_is_default::<advection::AdvectionConfig>();
        documented_is_default::<reacting::ReactingConfig>();
        documented_is_default::<scalability::ScalabilityConfig<scalability::ExprLibKind>>();
        documented_is_default::<scalability::ScalabilityConfig<scalability::WasatchKind>>();
    }
}
