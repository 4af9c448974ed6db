//! Human-readable sizes and rates for tables (JSON always carries exact bytes). Sizes are printed
//! by `bytesize` and read here: a size flag's units are powers of 1024 whatever their spelling
//! (`80G` is 80 GiB), where `bytesize` would read `G` and `GB` as powers of 1000.

use bytesize::ByteSize;
use vramtrace_collector::analysis::Analysis;
use vramtrace_collector::live::SampleAxis;

/// `512 B`, `4.0 KiB`, `1.5 GiB`.
pub fn bytes(n: u64) -> String {
    ByteSize(n).display().iec().to_string()
}

/// A device ordinal for tables: `?` when the trace could not tell it (-1).
pub fn device(d: i32) -> String {
    if d < 0 {
        "?".to_string()
    } else {
        d.to_string()
    }
}

/// What a growth rate is per: `per step`, or `per 64 ms window` for a trace sampled by time.
pub fn unit(a: &Analysis) -> String {
    match (a.growth.axis, a.growth.window_ns) {
        (SampleAxis::Time, Some(w)) => format!("per {} window", duration(w)),
        _ => "per step".to_string(),
    }
}

/// A short span: `1.5 s`, `64 ms`, `250 µs`.
pub fn duration(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.1} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{} ms", n / 1_000_000),
        n => format!("{} µs", n / 1000),
    }
}

/// Bytes per unit of a growth slope, signed: `+1.0 MiB`, `-512 B`.
pub fn signed_bytes(n: f64) -> String {
    let sign = if n < 0.0 { "-" } else { "+" };
    format!("{sign}{}", bytes(n.abs().round() as u64))
}

pub use vramtrace_collector::size::parse_size;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_device_is_a_question_mark() {
        assert_eq!(
            (device(0), device(7), device(-1)),
            ("0".into(), "7".into(), "?".into())
        );
    }

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes((1 << 20) - 1), "1024.0 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(bytes((1 << 50) + (1 << 49)), "1.5 PiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB");
    }
}
