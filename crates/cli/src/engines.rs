//! `easyio engines`: the copy engines and channels available on this machine.

use clap::Args;
use serde::Serialize;

use command::report;

#[derive(Args)]
pub struct EnginesArgs {
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Backend {
    name: &'static str,
    available: bool,
    channels: usize,
    detail: Vec<String>,
}

pub fn run(args: EnginesArgs) -> anyhow::Result<()> {
    let backends: Vec<Backend> = engine::available()
        .into_iter()
        .map(|b| Backend {
            name: b.kind.name(),
            available: b.available,
            channels: b.channels,
            detail: b.detail,
        })
        .collect();
    if args.json {
        return report::print_json(&backends);
    }
    let rows = backends
        .iter()
        .map(|b| {
            vec![
                b.name.to_string(),
                if b.available { "yes" } else { "no" }.to_string(),
                b.channels.to_string(),
                b.detail.join("\n"),
            ]
        })
        .collect();
    println!(
        "{}",
        report::table(&["engine", "available", "channels", "detail"], rows)
    );
    Ok(())
}
