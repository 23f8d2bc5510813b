//! `easyio generate` (hidden, for packagers): the manual pages and the shell
//! completions of this command, generated from its argument definitions so that they
//! always say what `--help` says.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use clap_complete::Shell;

#[derive(Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Manual pages in section 1: easyio.1 and one per subcommand (easyio-mount.1, ...).
    Man {
        /// The directory to write them into (created if missing).
        dir: PathBuf,
    },
    /// Completion scripts, under the names each shell looks for: easyio.bash,
    /// _easyio (zsh), easyio.fish.
    Completions {
        /// The directory to write them into (created if missing).
        dir: PathBuf,
        /// The shells (default: bash, zsh and fish).
        #[arg(long, value_delimiter = ',')]
        shell: Vec<Shell>,
    },
}

/// `easyio generate`: writes what `a` asks for, from `cmd`, the whole command line.
pub fn run(a: GenerateArgs, cmd: clap::Command) -> anyhow::Result<()> {
    match a.what {
        What::Man { dir } => man(cmd, &dir),
        What::Completions { dir, shell } => {
            let shells = if shell.is_empty() {
                vec![Shell::Bash, Shell::Zsh, Shell::Fish]
            } else {
                shell
            };
            completions(cmd, &dir, &shells)
        }
    }
}

/// Writes a page for `cmd` and each of its visible subcommands into `dir`.
fn man(cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    // Names subcommands as `easyio-mount`, as their pages are called.
    cmd.build();
    let source = format!("easyio {}", env!("CARGO_PKG_VERSION"));
    let mut written = 0;
    let mut pending = vec![cmd];
    while let Some(cmd) = pending.pop() {
        pending.extend(cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let page = clap_mangen::Man::new(cmd)
            .source(source.clone())
            .manual("easyio manual");
        page.generate_to(dir)
            .with_context(|| format!("writing a manual page into {}", dir.display()))?;
        written += 1;
    }
    println!("{written} manual pages written into {}", dir.display());
    Ok(())
}

/// Writes the completion script of each shell in `shells` into `dir`.
fn completions(mut cmd: clap::Command, dir: &Path, shells: &[Shell]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for shell in shells {
        let path = clap_complete::generate_to(*shell, &mut cmd, "easyio", dir)
            .with_context(|| format!("writing the {shell} completions into {}", dir.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}
