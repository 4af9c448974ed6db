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

/// Parses a size: plain bytes (`1073741824`) or with a unit (`80GiB`, `80G`, `512 MiB`, `4k`);
/// units are powers of 1024.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "unknown size unit '{other}' (use B, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size (examples: 80GiB, 512MiB, 1073741824)"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("'{text}' is not a usable size"));
    }
    Ok(bytes as u64)
}

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
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("1.5 g"), Ok(3 << 29));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
        assert!(parse_size("0").is_err());
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
