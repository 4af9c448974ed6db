//! Sizes as users write them in settings and options (`80GiB`, `512 MiB`, `4k`, `1073741824`):
//! one parser for the tracer's environment variables and the tools' flags, so both accept the
//! same words.

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
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("1.5 g"), Ok(3 << 29));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
        assert!(parse_size("0").is_err());
    }
}
