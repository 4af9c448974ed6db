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

/// `0.1% of 512.0 MiB`: `part` as a share of `whole`, where it is a share of it to a millionth
/// (a threshold set as a percentage of a device's memory; a threshold in bytes is not, and gets
/// `None`).
pub(crate) fn share_of(part: f64, whole: u64) -> Option<String> {
    if whole == 0 {
        return None;
    }
    let ppm = part / whole as f64 * 1e6;
    let whole_ppm = ppm.round();
    // A threshold is stored in whole bytes: half a byte off is within the rounding.
    let slack = 0.5 / whole as f64 * 1e6 + 1e-6;
    (whole_ppm >= 1.0 && (ppm - whole_ppm).abs() <= slack).then(|| share(whole_ppm / 1e6, whole))
}

/// `0.1% of 512.0 MiB`: `fraction` of `whole`, the percentage to four decimals.
pub fn share(fraction: f64, whole: u64) -> String {
    format!(
        "{}% of {}",
        (fraction * 100.0 * 1e4).round() / 1e4,
        bytes(whole)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_said_only_where_it_is_one() {
        // 0.1 % of 512 MiB, rounded to whole bytes as a threshold is.
        assert_eq!(
            share_of((536_870_912.0f64 * 0.001).round(), 536_870_912),
            Some("0.1% of 512.0 MiB".into())
        );
        assert_eq!(
            share_of(80.0 * 1024.0 * 1024.0 * 1024.0 * 0.0025, 80 << 30),
            Some("0.25% of 80.0 GiB".into())
        );
        // 1 MiB on 80 GiB is no whole share of a millionth.
        assert_eq!(share_of(1048576.0, 80 << 30), None);
        assert_eq!(share_of(1.0, 0), None);
    }

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
