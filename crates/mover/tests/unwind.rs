//! A panic between an engine submission and its wait does not unwind past the caller's
//! buffers while the engine still copies: `dma-sync` splits a bulk read between the
//! engine and the CPU, and a CPU share that panics (a piece outside the region) must
//! wait out the engine's share first. The engine's channel is held suspended while the
//! call runs; once the panic reaches the test, the buffer is poisoned and the channel
//! drains: the poison must stay.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use engine::{Engine, EngineConfig};
use mover::{Config, DmaSyncMover, Mover, ReadPiece};
use pmem::{Pmem, Region};

const REGION: u64 = 4 << 20;
const DATA: u64 = 1 << 20;
/// Bytes per piece: the two pieces together are a bulk read, split half and half.
const PIECE: usize = 64 << 10;
/// How long the channel stays suspended.
const HOLD: Duration = Duration::from_millis(300);
/// Odd, so never a byte the region holds here (all even).
const POISON: u8 = 0xA5;

#[test]
fn a_read_whose_cpu_share_panics_leaves_no_copy_running() {
    let pm: Arc<dyn Pmem> = Arc::new(Region::create_temp(REGION).unwrap());
    let cfg = Config::default();
    engine::format_records(&*pm, 0, cfg.channels_needed()).unwrap();
    let ecfg = EngineConfig {
        channels: cfg.channels_needed(),
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::software(pm.clone(), &ecfg).unwrap());
    let mover = DmaSyncMover::new(pm.clone(), engine.clone(), &cfg);
    let data: Vec<u8> = (0..PIECE).map(|i| (i as u8).wrapping_mul(2)).collect();
    pm.copy_persist(DATA, &data);

    // From before the hold starts: a pause of this thread between starting the releaser
    // and reading the clock would otherwise count against the hold.
    let start = Instant::now();
    engine.suspend(0).unwrap();
    let releaser = {
        let engine = engine.clone();
        thread::spawn(move || {
            thread::sleep(HOLD);
            engine.resume(0).unwrap();
        })
    };
    let mut engine_share = vec![1u8; PIECE];
    let mut cpu_share = vec![1u8; PIECE];
    // The default hook's backtrace can take longer than the hold: keep the panic quick.
    std::panic::set_hook(Box::new(|_| {}));
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut pieces = [
            ReadPiece {
                src: DATA,
                dst: &mut engine_share,
            },
            // Past the end of the region: the CPU's copy of it panics.
            ReadPiece {
                src: pm.len(),
                dst: &mut cpu_share,
            },
        ];
        mover.read(&mut pieces)
    }));
    let elapsed = start.elapsed();
    engine_share.fill(POISON);
    let _ = std::panic::take_hook();
    releaser.join().unwrap();
    engine.shutdown();

    assert!(
        result.is_err(),
        "the read of a piece outside the region panics"
    );
    assert!(
        engine_share.iter().all(|&b| b == POISON),
        "the engine wrote into the buffer after the panic left the read"
    );
    assert!(
        elapsed >= HOLD,
        "the panic left before the engine's share was over"
    );
}
