//! The checker sees the new calls' state: with extended-attribute sets stored but never
//! written back (a broken twin of the xattr commit), a random run in `cpu` and in
//! `async` must find a crash image whose attributes are not a state the model allows.
//! The same runs pass without the fault (`crashtest.rs`). (A process of its own: the
//! fault switch is global.)

use crash::{run, Config, Mode, Workload};
use fs::fault::{inject, Fault};

#[test]
fn an_xattr_set_never_written_back_is_caught() {
    for mode in [Mode::Cpu, Mode::Async] {
        inject(Fault::XattrSetWithoutWriteBack);
        let cfg = Config {
            stop_at_first_failure: true,
            ..Config::new(Workload::Random, mode)
        };
        let out = run(&cfg);
        inject(Fault::None);
        let out = out.unwrap_or_else(|e| panic!("{}: {e}", mode.name()));
        let f = out.failures.first().unwrap_or_else(|| {
            panic!(
                "{}: an xattr set never written back passed {} crash points",
                mode.name(),
                out.points
            )
        });
        eprintln!(
            "{}: caught at point {}: {}\n  {:?}",
            mode.name(),
            out.points,
            f.replay_command(),
            f.problem
        );
        let text = format!("{:?}", f.problem);
        assert!(
            text.contains("extended attribute")
                || text.contains("lgetxattr")
                || text.contains("llistxattr")
                || text.contains("mount failed"),
            "{}: caught for another reason: {text}",
            mode.name()
        );
    }
}
