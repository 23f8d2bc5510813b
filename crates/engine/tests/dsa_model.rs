//! The DSA backend against the device model: descriptors go through a portal page
//! (MOVDIR64B where the CPU has it), the model checks every field, copies and writes
//! completion records; errors come back as typed errors.

mod common;

use std::sync::Arc;

use common::{config, pattern, read, region, AREA, DATA};
use engine::dsa::model::{DeviceModel, ModelConfig, ModelPortal};
use engine::dsa::{Corruption, DsaError, Portal};
use engine::{format_records, record, record_is_done, Desc, Engine, Error};
use pmem::{Pmem, Region};

fn engine_on_model(region: &Arc<Region>) -> (DeviceModel, Engine) {
    engine_on_model_with(region, ModelConfig::default())
}

fn engine_on_model_with(region: &Arc<Region>, cfg: ModelConfig) -> (DeviceModel, Engine) {
    if !ModelPortal::uses_movdir64b() {
        println!(
            "note: this CPU has no MOVDIR64B; the model's portal is written with eight \
             8-byte stores instead of the real submission instruction"
        );
    }
    let (model, portal) = DeviceModel::start(cfg);
    let portals: Vec<Box<dyn Portal>> = vec![Box::new(portal)];
    let engine = Engine::dsa_with_portals(region.clone(), &config(1), portals).unwrap();
    (model, engine)
}

#[test]
fn memmove_both_ways_and_counter_published_by_the_device() {
    let region = region(8, 1);
    let (model, engine) = engine_on_model(&region);
    let src = pattern(1, 300_000);
    engine.write_sync(0, &src[5..], DATA + 3).unwrap();
    assert_eq!(read(&region, DATA + 3, src.len() - 5), src[5..]);
    assert_eq!(
        region.load_u64(record::counter_off(AREA, 0)),
        1,
        "the fenced fill wrote the counter"
    );
    let mut back = vec![0u8; 100_001];
    engine.read_sync(0, DATA + 3, &mut back).unwrap();
    assert_eq!(back[..], src[5..100_006]);
    // One batch descriptor plus two members (copy, counter fill) per submission.
    assert_eq!(model.descriptors(), 6);
    let stats = engine.stats(0).unwrap();
    assert_eq!((stats.descriptors, stats.queue_depth), (2, 0));
}

#[test]
fn statistics_include_a_batch_once_its_wait_returns() {
    // The counter fill is the batch's last member: the record says done before the
    // device writes the batch's own record. A waiter that returns then must still find
    // the batch in the statistics and not in the queue depth.
    let region = region(8, 1);
    let cfg = ModelConfig {
        batch_record_delay: std::time::Duration::from_millis(5),
        ..ModelConfig::default()
    };
    let (_model, engine) = engine_on_model_with(&region, cfg);
    let src = pattern(3, 8192);
    for i in 1..=3u64 {
        engine.write_sync(0, &src, DATA).unwrap();
        let stats = engine.stats(0).unwrap();
        assert_eq!((stats.descriptors, stats.queue_depth), (i, 0));
        assert_eq!(stats.bytes, i * 8192);
    }
}

#[test]
fn batch_of_copies_gets_one_sn_and_one_in_flight_at_a_time() {
    let region = region(8, 1);
    let (_model, engine) = engine_on_model(&region);
    let bufs: Vec<Vec<u8>> = (0..5)
        .map(|i| pattern(i as u64, 10_000 + i * 999))
        .collect();
    let descs: Vec<Desc> = bufs
        .iter()
        .enumerate()
        .map(|(i, b)| Desc::write(b, DATA + i as u64 * 65536))
        .collect();
    // SAFETY: `bufs` lives until the SN is waited for.
    let sn = unsafe { engine.submit(0, &descs).unwrap() };
    assert_eq!(sn.counter(), 5);
    // SAFETY: refused or completed before `bufs` is dropped (waited below).
    match unsafe { engine.try_submit(0, &descs[..1]) } {
        Err(Error::Busy { .. }) => {}
        Ok(later) => engine.wait(later).unwrap(),
        Err(e) => panic!("{e}"),
    }
    engine.wait(sn).unwrap();
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(&read(&region, DATA + i as u64 * 65536, b.len()), b);
    }
    assert!(record_is_done(&*region, AREA, sn));
    let too_many = vec![descs[0]; engine.max_batch() + 1];
    // SAFETY: refused.
    let refused = unsafe { engine.try_submit(0, &too_many) };
    assert!(matches!(refused, Err(Error::BadBatch(_))));
}

/// Maps a page with no access, so touching it faults.
fn inaccessible_page() -> *mut u8 {
    // SAFETY: an anonymous PROT_NONE page, checked below; unmapped by the test.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p as *mut u8
}

#[test]
fn page_fault_is_a_typed_error_and_the_counter_stays_behind() {
    let region = region(8, 1);
    let (_model, engine) = engine_on_model(&region);
    let good = pattern(2, 8192);
    engine.write_sync(0, &good, DATA).unwrap();
    let page = inaccessible_page();
    // A good copy, then one from the inaccessible page.
    let descs = [
        Desc::write(&good, DATA + 65536),
        Desc::to_region(page, DATA + 131072, 4096),
    ];
    // SAFETY: the device model reads through process_vm_readv, so the inaccessible page
    // yields a fault status rather than a crash; `good` outlives the wait.
    let sn = unsafe { engine.submit(0, &descs).unwrap() };
    let err = engine.wait(sn).unwrap_err();
    let Error::Device {
        channel: 0,
        error:
            DsaError::PageFault {
                addr,
                write,
                bytes_completed,
            },
    } = &err
    else {
        panic!("expected a page fault, got {err}");
    };
    assert_eq!((*addr, *write, *bytes_completed), (page as u64, false, 0));
    assert_eq!(err.errno(), libc::EFAULT);
    assert!(
        !engine.is_done(sn),
        "the fenced counter write must be abandoned"
    );
    assert_eq!(region.load_u64(record::counter_off(AREA, 0)), 1);
    // The channel stays failed: nothing later may complete past the failed copy.
    // SAFETY: refused.
    let again = unsafe { engine.try_submit(0, &descs[..1]) }.unwrap_err();
    assert!(matches!(
        again,
        Error::Device {
            error: DsaError::PageFault { .. },
            ..
        }
    ));
    // SAFETY: mapped above.
    unsafe { libc::munmap(page as *mut libc::c_void, 4096) };
}

#[test]
fn write_fault_reports_the_destination_and_bytes_completed() {
    let region = region(8, 1);
    let (_model, engine) = engine_on_model(&region);
    let page = inaccessible_page();
    let src = pattern(3, 4096);
    engine.write_sync(0, &src, DATA).unwrap();
    // SAFETY: the model writes through process_vm_writev; the page only faults.
    let sn = unsafe {
        engine
            .submit(0, &[Desc::from_region(DATA, page, 4096)])
            .unwrap()
    };
    let err = engine.wait(sn).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Device {
                error: DsaError::PageFault {
                    write: true,
                    bytes_completed: 0,
                    ..
                },
                ..
            }
        ),
        "{err}"
    );
    // SAFETY: mapped above.
    unsafe { libc::munmap(page as *mut libc::c_void, 4096) };
}

#[test]
fn invalid_flags_are_a_typed_error() {
    let region = region(8, 1);
    let (_model, engine) = engine_on_model(&region);
    let src = pattern(4, 4096);
    engine
        .testing()
        .corrupt_next(0, Corruption::InvalidFlags)
        .unwrap();
    // SAFETY: `src` outlives the wait.
    let sn = unsafe { engine.submit(0, &[Desc::write(&src, DATA)]).unwrap() };
    let err = engine.wait(sn).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Device {
                error: DsaError::InvalidFlags { flags: 0x40 },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.errno(), libc::EINVAL);
    assert!(!engine.is_done(sn));
}

#[test]
fn misaligned_completion_record_is_a_typed_error() {
    let region = region(8, 1);
    let (_model, engine) = engine_on_model(&region);
    let src = pattern(5, 4096);
    engine
        .testing()
        .corrupt_next(0, Corruption::MisalignedCompletion)
        .unwrap();
    // SAFETY: `src` outlives the wait.
    let sn = unsafe { engine.submit(0, &[Desc::write(&src, DATA)]).unwrap() };
    let err = engine.wait(sn).unwrap_err();
    let Error::Device {
        error: DsaError::CompletionRecordAlign { addr },
        ..
    } = err
    else {
        panic!("expected a completion-record alignment error, got {err}");
    };
    assert_eq!(addr % 32, 8);
    assert!(!engine.is_done(sn));
}

/// A member the device cannot report on raises a software error before the batch's
/// record is written, while the other members still copy: the wait must not return
/// (handing the buffers back) before the record says the device is done.
#[test]
fn a_software_error_is_reported_only_once_the_batch_is_over() {
    const MEMBERS: usize = 8;
    const LEN: usize = 1 << 20;
    let delay = std::time::Duration::from_millis(50);
    let region = region(8, 1);
    let (_model, engine) = engine_on_model_with(
        &region,
        ModelConfig {
            batch_record_delay: delay,
            ..ModelConfig::default()
        },
    );
    region.write(DATA, &pattern(6, LEN));
    let mut dst = vec![0u8; MEMBERS * LEN];
    let descs: Vec<Desc> = dst.chunks_mut(LEN).map(|d| Desc::read(DATA, d)).collect();
    engine
        .testing()
        .corrupt_next(0, Corruption::MisalignedCompletion)
        .unwrap();
    let start = std::time::Instant::now();
    // SAFETY: `dst` is neither touched nor freed until the wait returns, when the engine
    // is done with it, failed or not (the poison check below tests that promise).
    let sn = unsafe { engine.submit(0, &descs).unwrap() };
    let err = engine.wait(sn).unwrap_err();
    assert!(
        start.elapsed() >= delay,
        "the wait returned before the batch's record"
    );
    assert!(
        matches!(
            err,
            Error::Device {
                error: DsaError::CompletionRecordAlign { .. },
                ..
            }
        ),
        "{err}"
    );
    // Nothing may write into the buffer once the wait has returned.
    dst.fill(0xEE);
    std::thread::sleep(delay * 2);
    assert!(
        dst.iter().all(|&b| b == 0xEE),
        "the device wrote after the wait"
    );
}

#[test]
fn selecting_dsa_without_a_device_says_what_was_looked_for() {
    if std::path::Path::new(engine::dsa::SYSFS_DSA).exists() {
        testkit::skip("this machine has an idxd driver; the no-device message is not reachable");
        return;
    }
    let region = region(1, 1);
    let err = Engine::dsa(region, &config(1)).err().expect("no DSA here");
    let msg = err.to_string();
    assert!(
        msg.contains(engine::dsa::SYSFS_DSA) && msg.contains(engine::dsa::DEV_DSA),
        "{msg}"
    );
    assert_eq!(err.errno(), libc::ENODEV);
    let info = engine::available();
    let dsa = info
        .iter()
        .find(|b| b.kind == engine::BackendKind::Dsa)
        .unwrap();
    assert!(!dsa.available && dsa.detail[0].contains("/sys/bus/dsa"));
}

#[test]
fn a_device_cannot_be_given_a_region_that_is_not_a_mapping() {
    let mem: Arc<dyn Pmem> = Arc::new(pmem::MemPmem::new(4 << 20));
    format_records(&*mem, AREA, 1).unwrap();
    let (_model, portal) = DeviceModel::start(ModelConfig::default());
    let err = Engine::dsa_with_portals(mem, &config(1), vec![Box::new(portal)])
        .err()
        .expect("a region in memory has no device addresses");
    assert!(
        matches!(&err, Error::Config(m) if m.contains("mapped region")),
        "{err}"
    );
}

#[test]
fn a_model_reaches_a_traced_region_through_a_window_and_the_trace_sees_its_copies() {
    let tp = Arc::new(pmem::TracePmem::new(vec![0u8; 4 << 20]));
    format_records(&*tp, AREA, 2).unwrap();
    let engine = Engine::dsa_model(tp.clone(), &config(2), ModelConfig::default()).unwrap();
    assert_eq!((engine.kind().name(), engine.channels()), ("dsa", 2));
    let src = pattern(9, 70_000);
    engine.write_sync(1, &src, DATA + 5).unwrap();
    let mut back = vec![0u8; src.len()];
    engine.read_sync(1, DATA + 5, &mut back).unwrap();
    assert_eq!(back, src);
    drop(engine);
    let tp = Arc::into_inner(tp).expect("the engine let go of the region");
    let trace = tp.into_trace();
    // The device thread stored the data and the counter, and fenced them itself.
    let device: Vec<_> = trace
        .events
        .iter()
        .filter(|e| trace.role_of(e) == Some(threads::Role::CopyDevice))
        .collect();
    let counter = record::counter_off(AREA, 1);
    let data_at = device
        .iter()
        .position(|e| e.off >= DATA && e.kind == pmem::trace::EventKind::NtStore)
        .expect("the copy's non-temporal stores");
    let counter_at = device
        .iter()
        .position(|e| e.off == counter)
        .expect("the counter store");
    assert!(data_at < counter_at);
    assert!(device[data_at..counter_at]
        .iter()
        .any(|e| e.kind == pmem::trace::EventKind::Fence));
    assert_eq!(final_contents(&trace, DATA + 5, src.len()), src);
}

/// The region's final contents at `off` according to a trace: its base image with
/// every store applied in order.
fn final_contents(trace: &pmem::Trace, off: u64, len: usize) -> Vec<u8> {
    let mut img = trace.base.clone();
    for e in &trace.events {
        let data = trace.data_of(e);
        img[e.off as usize..e.off as usize + data.len()].copy_from_slice(data);
    }
    img[off as usize..off as usize + len].to_vec()
}
