//! Threads that ask for one new kernel at the same moment run the C
//! compiler once (8 threads asking for 3 new kernels ran it 24 times).
//! Alone in its test binary: the compile counters are process-wide.

use std::time::{SystemTime, UNIX_EPOCH};
use watershed_backends::codegen::{c_compiler, compile, statistics};

#[test]
fn eight_threads_asking_for_one_new_kernel_compile_it_once() {
    if let Err(why) = c_compiler() {
        eprintln!("skipped: {why}");
        return;
    }
    // A name no cache holds yet.
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let keys: Vec<String> = (0..3)
        .map(|k| format!("ws_compile_once_{}_{nonce}_{k}", std::process::id()))
        .collect();
    let before = statistics().compilations;
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for key in &keys {
                    let source = format!("double {key}(double x) {{ return 2.0 * x; }}\n");
                    compile::library_for(key, &source).expect("compiles and loads");
                }
            });
        }
    });
    assert_eq!(statistics().compilations - before, 3);
}
