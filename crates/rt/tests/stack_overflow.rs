//! A uthread that overflows its stack dies with a message naming the overflow, not with
//! silent corruption or a bare SIGSEGV. Checked in a child process (this test binary run
//! again on the ignored test that overflows).

use std::process::Command;

/// The ignored test below only overflows when this variable is set, so running ignored
/// tests by hand does not abort the run.
const CHILD_ENV: &str = "RT_STACK_OVERFLOW_CHILD";

#[test]
fn a_uthread_stack_overflow_is_reported_and_fatal() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "overflow_a_uthread_stack",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
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
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "overflow_a_thread_stack",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child survived: {stderr}");
    assert!(!stderr.contains("uthread stack overflow"), "{stderr}");
    assert!(stderr.contains("has overflowed its stack"), "{stderr}");
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
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
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
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    // A runtime exists, so our handler is installed and must pass this fault on.
    let _rt = rt::Runtime::new(1).unwrap();
    let t = std::thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(|| recurse(0))
        .unwrap();
    println!("unreachable: {:?}", t.join());
}
