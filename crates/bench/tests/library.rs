//! The benchmarks used as a library, as a door's benchmark or a test would: an
//! application run on a real region in two targets gives verified rows, and its plot
//! is a whole SVG document with a line per target.

use std::sync::Arc;
use std::time::Duration;

use bench::app::{self, App, AppSpec};
use bench::target::{EngineArg, Target};
use command::output::Output;
use fs::Mode;
use pmem::slowmem::Preset;
use pmem::{Pmem, Region};

#[test]
fn an_application_runs_verified_on_easyio_and_the_kernel_and_plots() {
    let region: Arc<dyn Pmem> = Arc::new(Region::create_temp(64 << 20).unwrap());
    let specs: Vec<AppSpec> = [Target::Easyio(Mode::Async), Target::Kernel]
        .into_iter()
        .flat_map(|mode| {
            [1, 2].map(|threads| AppSpec {
                app: App::Grep,
                mode,
                threads,
                uthreads_per_core: 2,
                slowmem: Preset::None,
                engine: EngineArg::Software,
                duration: Duration::from_millis(30),
            })
        })
        .collect();
    let rows = app::run_all(&specs, 0.02, &region, true).unwrap();
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert!(
            r.verified && r.tasks > 0,
            "{}",
            serde_json::to_string(r).unwrap()
        );
        let clients = if r.mode == Target::Kernel {
            r.threads
        } else {
            2 * r.threads
        };
        assert_eq!(r.clients, clients);
    }
    let table = app::table(&rows);
    assert!(
        table.contains("async") && table.contains("kernel"),
        "{table}"
    );

    let path = std::env::temp_dir().join(format!("easyio-bench-lib-{}.svg", std::process::id()));
    let out = Output::create(&path, None).unwrap();
    app::write_plot(out, "t", &["caption".into()], &rows).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        svg.contains("xmlns=\"http://www.w3.org/2000/svg\"") && svg.trim_end().ends_with("</svg>")
    );
    // One panel (grep on DRAM), one line per target, a dot per measured point.
    assert_eq!(svg.matches("stroke-width=\"2\"").count(), 2, "{svg}");
    assert_eq!(svg.matches("<circle").count(), 4 + 2, "{svg}");
    assert!(svg.contains("throughput (tasks/s)") && svg.contains("threads"));
}
