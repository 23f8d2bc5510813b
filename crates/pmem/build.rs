//! Compiles the C benchmark peer (`c/nt_peer.c`).

fn main() {
    println!("cargo:rerun-if-changed=c/nt_peer.c");
    cc::Build::new()
        .file("c/nt_peer.c")
        .opt_level(2)
        .warnings(true)
        .compile("easyio_nt_peer");
}
