//! Builds the small C part of the preload: its per-thread state in initial-exec TLS, and the
//! variadic exec calls (`execl`, `execlp`, `execle`), which stable Rust cannot define.

fn main() {
    println!("cargo:rerun-if-changed=src/capture/tls.c");
    println!("cargo:rerun-if-changed=src/hooks/exec.c");
    cc::Build::new()
        .file("src/capture/tls.c")
        .file("src/hooks/exec.c")
        .flag_if_supported("-ftls-model=initial-exec")
        .opt_level(2)
        .compile("vramtrace_tls");
}
