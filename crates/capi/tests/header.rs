//! The checked-in `include/easyio.h` is what cbindgen generates from the crate now:
//! this fails when the header is stale. `EASYIO_BLESS=1` rewrites it instead.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/easyio.h");
    if std::env::var("EASYIO_BLESS").is_ok_and(|v| !v.is_empty() && v != "0") {
        std::fs::write(&path, &generated).expect("write include/easyio.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "crates/capi/include/easyio.h is stale: regenerate it with \
         `EASYIO_BLESS=1 cargo test -p capi --test header` and commit it"
    );
}
