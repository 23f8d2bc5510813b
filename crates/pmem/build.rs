//! Compiles the C benchmark peer (`c/nt_peer.c`) when the `peer` feature asks for it.

fn main() {
    println!("cargo:rerun-if-changed=c/nt_peer.c");
    if std::env::var_os("CARGO_FEATURE_PEER").is_none() {
        return;
    }
    cc::Build::new()
        .file("c/nt_peer.c")
        .opt_level(2)
        .warnings(true)
        .compile("easyio_nt_peer");
}
