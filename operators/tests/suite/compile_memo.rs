//! A kernel source the C compiler refuses is refused again from memory:
//! the second attempt returns the same failure (source and log) without a
//! second compiler run. Its own test binary, so that no other test's
//! compilations move the process-wide counters.

use watershed_operators::OperatorError;
use watershed_operators::codegen::{self, compile};

#[test]
fn a_refused_source_is_not_compiled_twice() {
    if codegen::c_compiler().is_err() {
        eprintln!("skipped: no C compiler");
        return;
    }
    let source = "void refused(void) { not C at all; }\n";
    let key = format!("ws_test_refused_{}", std::process::id());
    let first = compile::library_for(&key, source).unwrap_err();
    let after_first = compile::statistics().compilations;
    let second = compile::library_for(&key, source).unwrap_err();
    assert_eq!(
        compile::statistics().compilations,
        after_first,
        "the compiler ran again for a source it had refused"
    );
    match (&first, &second) {
        (OperatorError::Compile(a), OperatorError::Compile(b)) => {
            assert_eq!(a.source_text, b.source_text);
            assert_eq!(a.log, b.log);
            assert!(b.log.contains("error"), "log: {}", b.log);
            assert!(b.kernel.contains("ws_test_refused_"));
        }
        other => panic!("expected two OperatorError::Compile, got {other:?}"),
    }
}
