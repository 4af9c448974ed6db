//! Sizes: read as users write them (`80GiB`, `512 MiB`, `4k`, `1073741824`, `0`), printed as
//! `1.5 GiB`.
//!
//! A size's units are powers of 1024 whatever their spelling (`80G` is 80 GiB): GPU memory is
//! sold and reported in binary units, and a `G` that meant 10^9 here and 2^30 there would make
//! the same flag mean two things. Printing goes through `bytesize`.

use bytesize::ByteSize;

/// The units a size may carry, for error messages.
const UNITS: &str = "B, KiB, MiB, GiB, TiB";

/// Parses a size: plain bytes (`1073741824`, `0`) or a number with a unit (`80GiB`, `80G`,
/// `512 MiB`, `1.5g`, `4k`); units are powers of 1024. A fraction of a byte is rounded. Errors
/// read after "is" or after a flag's name: `not a size (…)`.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (number, unit) = super::number_and_unit(text, "size")?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("not a size: unknown unit '{other}' (use {UNITS})")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| "not a size (examples: 80GiB, 512MiB, 1073741824)".to_string())?;
    let bytes = (value * (1u64 << shift) as f64).round();
    if !(bytes.is_finite() && bytes < u64::MAX as f64) {
        return Err("not a size: too large".into());
    }
    Ok(bytes as u64)
}

/// `512 B`, `4.0 KiB`, `1.5 GiB`: for people; exact numbers go in JSON.
pub fn bytes(n: u64) -> String {
    ByteSize(n).display().iec().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("80G"), Ok(80 << 30));
        assert_eq!(parse_size("1.5 g"), Ok(3 << 29));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("0MiB"), Ok(0));
        assert!(parse_size("lots").is_err());
        assert_eq!(
            parse_size("3 parsecs"),
            Err("not a size: unknown unit 'parsecs' (use B, KiB, MiB, GiB, TiB)".into())
        );
        assert_eq!(
            parse_size("-1MiB"),
            Err("not a size: sizes are never negative".into())
        );
        assert!(parse_size("99999999TiB").is_err());
    }

    #[test]
    fn sizes_print_in_binary_units() {
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
