//! Calibration profiles (Fastmove §6.3.2, §7 "Automatic profiling"): the thresholds
//! measured on one machine and engine, saved as a small TOML file that mount loads in
//! place of the papers' defaults. A profile from another machine or engine is refused.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Config, Error};

/// Format version written into every profile; a profile of another version is refused.
pub const PROFILE_VERSION: u32 = 1;

/// What identifies the machine a profile was measured on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// Host name.
    pub host: String,
    /// CPU model, as the kernel names it.
    pub cpu: String,
    /// Logical CPUs.
    pub cpus: usize,
}

impl Machine {
    /// This machine.
    pub fn here() -> Machine {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|m| m.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Machine { host, cpu, cpus }
    }
}

/// The thresholds calibration sets (the fields of [`Config`] of the same names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    /// `async`: copies up to this size go by CPU.
    pub cpu_max: usize,
    /// `dma-sync`: smallest write sent to the engine (write turning point).
    pub dma_write_min: usize,
    /// `dma-sync`: smallest read sent to the engine (read turning point).
    pub dma_read_min: usize,
    /// `dma-sync`: engine requests in flight at which its bandwidth saturates.
    pub dma_concurrency: usize,
}

/// A calibration profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// [`PROFILE_VERSION`].
    pub version: u32,
    /// Where it was measured.
    pub machine: Machine,
    /// Engine backend it was measured with (`software`, `dsa`, ...).
    pub engine: String,
    /// Engine bandwidth at saturation, bytes per second (the channel manager's B limit
    /// is set from it).
    pub engine_bandwidth: u64,
    /// The thresholds.
    pub thresholds: Thresholds,
}

impl Profile {
    /// The profile as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a profile always serialises")
    }

    /// Parses a profile.
    pub fn from_toml(text: &str) -> Result<Profile, Error> {
        let p: Profile =
            toml::from_str(text).map_err(|e| Error::Config(format!("profile: {e}")))?;
        if p.version != PROFILE_VERSION {
            return Err(Error::Config(format!(
                "profile: version {} (this build reads version {PROFILE_VERSION}); run \
                 `easyio calibrate` again",
                p.version
            )));
        }
        Ok(p)
    }

    /// Reads a profile file.
    pub fn load(path: &Path) -> Result<Profile, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("profile {}: {e}", path.display())))?;
        Profile::from_toml(&text)
    }

    /// Writes the profile file.
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        std::fs::write(path, self.to_toml())
            .map_err(|e| Error::Config(format!("profile {}: {e}", path.display())))
    }

    /// Refuses a profile measured on another machine or with another engine.
    pub fn check(&self, here: &Machine, engine: &str) -> Result<(), Error> {
        if &self.machine != here {
            return Err(Error::Config(format!(
                "profile was measured on another machine ({} / {} / {} CPUs; this is {} / {} \
                 / {} CPUs): run `easyio calibrate` here",
                self.machine.host,
                self.machine.cpu,
                self.machine.cpus,
                here.host,
                here.cpu,
                here.cpus
            )));
        }
        if self.engine != engine {
            return Err(Error::Config(format!(
                "profile was measured with the {} engine, not {engine}: run `easyio calibrate \
                 --engine {engine}`",
                self.engine
            )));
        }
        Ok(())
    }

    /// `cfg` with this profile's thresholds in place of its own.
    pub fn apply(&self, mut cfg: Config) -> Config {
        let t = &self.thresholds;
        cfg.cpu_max = t.cpu_max;
        cfg.dma_write_min = t.dma_write_min;
        cfg.dma_read_min = t.dma_read_min;
        cfg.dma_concurrency = t.dma_concurrency.max(1);
        cfg
    }

    /// Loads, checks against this machine and `engine`, and applies a profile to `cfg`.
    pub fn load_into(path: &Path, engine: &str, cfg: Config) -> Result<Config, Error> {
        let p = Profile::load(path)?;
        p.check(&Machine::here(), engine)?;
        Ok(p.apply(cfg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Profile {
        Profile {
            version: PROFILE_VERSION,
            machine: Machine::here(),
            engine: "software".into(),
            engine_bandwidth: 5_000_000_000,
            thresholds: Thresholds {
                cpu_max: 65536,
                dma_write_min: 131072,
                dma_read_min: 262144,
                dma_concurrency: 3,
            },
        }
    }

    #[test]
    fn round_trips_and_applies() {
        let p = sample();
        let q = Profile::from_toml(&p.to_toml()).unwrap();
        assert_eq!(p, q);
        let cfg = q.apply(Config::default());
        assert_eq!(cfg.cpu_max, 65536);
        assert_eq!(cfg.dma_write_min, 131072);
        assert_eq!(cfg.dma_read_min, 262144);
        assert_eq!(cfg.dma_concurrency, 3);
    }

    #[test]
    fn refuses_other_machine_engine_and_version() {
        let p = sample();
        let mut other = Machine::here();
        other.cpus += 1;
        let e = p.check(&other, "software").unwrap_err().to_string();
        assert!(e.contains("another machine"), "{e}");
        let e = p.check(&Machine::here(), "dsa").unwrap_err().to_string();
        assert!(e.contains("software engine"), "{e}");
        let mut old = p.clone();
        old.version = 0;
        let e = Profile::from_toml(&old.to_toml()).unwrap_err().to_string();
        assert!(e.contains("version"), "{e}");
    }
}
