//! Compiles `src/variadic.c`: the shim's entries of C-variadic type (`execl`,
//! `dprintf`, `syscall`, ...), which stable Rust cannot define. `src/variadic.rs`
//! exports them.

fn main() {
    println!("cargo:rerun-if-changed=src/variadic.c");
    cc::Build::new()
        .file("src/variadic.c")
        .flag("-std=gnu11")
        .flag("-fvisibility=hidden")
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("easyio_preload_variadic");
}
