//! Test-only: running a whole test suite on another engine. With the `testing` feature,
//! [`ENGINE_ENV`] set to `dsa-model` makes every engine a mover opens the DSA backend
//! on device models ([`engine::Engine::dsa_model`]), whatever the mount asked for, so
//! that the file system's tests and the crash harness run their data copies through
//! the DSA path on a machine without DSA.

use pmem::Pmem;

/// The environment variable that picks the engine of every mover in the process.
pub const ENGINE_ENV: &str = "EASYIO_TEST_ENGINE";

/// The engine [`ENGINE_ENV`] asks for, if it names one; an unknown name is an error
/// rather than a silent run on the default engine.
pub(crate) fn engine_override(
    pm: &std::sync::Arc<dyn Pmem>,
    cfg: &engine::EngineConfig,
) -> Result<Option<engine::Engine>, crate::Error> {
    match std::env::var(ENGINE_ENV).as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("dsa-model") => Ok(Some(engine::Engine::dsa_model(
            pm.clone(),
            cfg,
            engine::dsa::model::ModelConfig::default(),
        )?)),
        Ok(other) => Err(crate::Error::Config(format!(
            "{ENGINE_ENV}={other:?}: the only engine a test can ask for is dsa-model"
        ))),
    }
}
