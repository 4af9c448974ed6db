//! Builds the small C part of the preload: its per-thread state in initial-exec TLS.

fn main() {
    println!("cargo:rerun-if-changed=src/capture/tls.c");
    cc::Build::new()
        .file("src/capture/tls.c")
        .flag_if_supported("-ftls-model=initial-exec")
        .opt_level(2)
        .compile("vramtrace_tls");
}
