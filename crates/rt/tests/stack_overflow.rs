//! A uthread that overflows its stack dies with a message naming the overflow, not with
//! silent corruption or a bare SIGSEGV. Checked in a child process (this test binary run
//! again on the ignored test that overflows).

use std::time::Duration;

/// Set by the tests for their child halves (the ignored tests below), which refuse to
/// run without it: run by hand they would abort the run.
const CHILD_ENV: &str = "RT_STACK_OVERFLOW_CHILD";
/// Longest a child half may take before it is killed and the test fails.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn a_uthread_stack_overflow_is_reported_and_fatal() {
    let out = overflow("overflow_a_uthread_stack");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child survived: {stderr}");
    assert!(
        stderr.contains("uthread stack overflow"),
        "no overflow message: {stderr}"
    );
    // It aborted (SIGABRT), not crashed on the fault itself.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
}

#[test]
fn an_ordinary_thread_stack_overflow_is_still_the_standard_librarys() {
    let out = overflow("overflow_a_thread_stack");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child survived: {stderr}");
    assert!(!stderr.contains("uthread stack overflow"), "{stderr}");
    assert!(stderr.contains("has overflowed its stack"), "{stderr}");
}

/// The child half `name` run, with what it printed.
fn overflow(name: &str) -> std::process::Output {
    testkit::run(testkit::child_half(name).env(CHILD_ENV, "1"), LIMIT)
}

/// Recurses with a frame the optimiser cannot remove until the stack runs out.
fn recurse(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth as u8; 512]);
    if depth == u64::MAX {
        return 0;
    }
    recurse(depth + 1) + u64::from(frame[7])
}

#[test]
#[ignore = "overflows a uthread stack; run in a child process by the test above"]
fn overflow_a_uthread_stack() {
    assert!(
        std::env::var_os(CHILD_ENV).is_some(),
        "a child half: run by the test above"
    );
    let rt = rt::Runtime::builder()
        .workers(1)
        .stack_size(rt::MIN_STACK_SIZE)
        .build()
        .unwrap();
    let v = rt.block_on(|| recurse(0));
    println!("unreachable: {v}");
}

#[test]
#[ignore = "overflows a thread stack; run in a child process by the test above"]
fn overflow_a_thread_stack() {
    assert!(
        std::env::var_os(CHILD_ENV).is_some(),
        "a child half: run by the test above"
    );
    // A runtime exists, so our handler is installed and must pass this fault on.
    let _rt = rt::Runtime::new(1).unwrap();
    let t = std::thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(|| recurse(0))
        .unwrap();
    println!("unreachable: {:?}", t.join());
}
